"""The hippo, ucdiam, mail and alerts config sections (and their skeleton text)."""

from __future__ import annotations

import re

import pytest

from cheeto_like.config import SKELETON, AlertsConfig, HippoConfig, IAMConfig, load_config
from cheeto_like.errors import ConfigError

SECTIONS = ("hippo", "ucdiam", "mail", "alerts")


def _uncomment(section: str) -> str:
    """The skeleton's commented-out block for ``section``, made live (its ``# #`` lines,
    which document optional keys, are kept as comments)."""
    block = re.search(rf"^# {section}:.*?(?=\n\n|\Z)", SKELETON, re.MULTILINE | re.DOTALL)
    assert block, section
    lines = []
    for line in block.group(0).splitlines():
        if line.startswith("# ") and not line.startswith("#   #"):
            lines.append(line[2:])
    return "\n".join(lines) + "\n"


def test_the_skeleton_documents_valid_people_sections(tmp_path):
    text = "".join(_uncomment(s) for s in SECTIONS)
    path = tmp_path / "config.yaml"
    path.write_text(text)
    config = load_config(path)
    assert config.hippo.site_aliases == {"caesfarm": "farm"}
    assert config.ucdiam.base_url == "https://iet-ws.ucdavis.edu/api/iam"
    assert config.mail.transport == "smtp" and config.mail.smtp.starttls
    assert config.alerts.to == ["hpc-ops@example.org"]


def test_site_aliases_are_case_insensitive_and_must_not_conflict():
    config = HippoConfig(base_url="https://h.example.org/", api_key="k",
                         site_aliases={"CaesFarm": "Farm", "caesfarm": "farm"})
    assert config.site_aliases == {"caesfarm": "farm"} and config.base_url.endswith(".org")
    with pytest.raises(ValueError, match="given twice"):
        HippoConfig(base_url="https://h.example.org", api_key="k",
                    site_aliases={"A": "farm", "a": "peloton"})
    assert config.site_options("farm").grant_slurm is False


@pytest.mark.parametrize(("text", "message"), [
    ("hippo: {base_url: ftp://x, api_key: k}\n", "not an http"),
    ("ucdiam: {base_url: https://x.org, api_key: k, grace: 3}\n", "ucdiam.grace: unknown key"),
    ("ucdiam: {base_url: https://x.org, api_key: k, api_key_header: 'X Key'}\n",
     "api_key_header"),
    ("mail: {transport: carrier-pigeon}\n", "mail.transport"),
    ("alerts: {to: []}\n", "alerts.to"),
    ("alerts: {to: [not-an-address]}\n", "not an e-mail address"),
])
def test_bad_people_sections_are_one_line_errors(tmp_path, text, message):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_iam_defaults():
    config = IAMConfig(base_url="https://iet-ws.ucdavis.edu/api/iam", api_key="k")
    assert (config.grace_days, config.expiry_offset_days, config.api_key_header) == (
        1, 30, "X-API-Key")
    assert config.refresh.email and config.refresh.fullname and not config.refresh.name
    assert AlertsConfig(to=["ops@example.org"]).stuck_after_minutes == 120

"""Session fixtures for the people-facing integrations: the fake HiPPO and IAM servers
and the SMTP sinks, started once per session; per-test fixtures hand out their state
(reset) and configs pointing at them with fast retries.

``tests/hippo``, ``tests/iam`` and ``tests/mail`` import the fixtures in their
``conftest.py``; test modules import only the config helpers (``hippo_config``, …).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from cheeto_like.config import HippoConfig, IAMConfig, MailConfig, SMTPConfig

from .fake_hippo import API_KEY as HIPPO_KEY
from .fake_hippo import FakeHippo, FakeHippoState
from .fake_iam import API_KEY as IAM_KEY
from .fake_iam import FakeIAM, FakeIAMState
from .smtp_sink import SmtpSink

FAST = {"request_timeout_seconds": 0.5, "retries": 2, "retry_backoff_seconds": 0.01}


@pytest.fixture(scope="session")
def fake_hippo_server() -> Iterator[FakeHippo]:
    server = FakeHippo().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def fake_iam_server() -> Iterator[FakeIAM]:
    server = FakeIAM().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def smtp_server() -> Iterator[SmtpSink]:
    sink = SmtpSink().start()
    yield sink
    sink.stop()


@pytest.fixture(scope="session")
def smtp_tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SmtpSink]:
    sink = SmtpSink(tls_dir=tmp_path_factory.mktemp("smtp-tls")).start()
    yield sink
    sink.stop()


@pytest.fixture
def hippo(fake_hippo_server: FakeHippo) -> FakeHippoState:
    """The fake HiPPO's state, emptied for this test."""
    fake_hippo_server.state.reset()
    return fake_hippo_server.state


@pytest.fixture
def iam(fake_iam_server: FakeIAM) -> FakeIAMState:
    fake_iam_server.state.reset()
    return fake_iam_server.state


@pytest.fixture
def mailbox(smtp_server: SmtpSink) -> SmtpSink:
    smtp_server.clear()
    return smtp_server


def hippo_config(server: FakeHippo, **overrides: Any) -> HippoConfig:
    values: dict[str, Any] = {"base_url": server.url, "api_key": HIPPO_KEY, **FAST,
                              "site_aliases": {"CaesFarm": "farm"}, "max_tries": 3}
    return HippoConfig(**(values | overrides))


def iam_config(server: FakeIAM, **overrides: Any) -> IAMConfig:
    values: dict[str, Any] = {"base_url": server.url, "api_key": IAM_KEY, **FAST}
    return IAMConfig(**(values | overrides))


def mail_config(sink: SmtpSink, **overrides: Any) -> MailConfig:
    smtp = SMTPConfig(host="127.0.0.1", port=sink.port, timeout_seconds=5)
    return MailConfig(**({"smtp": smtp, "from_address": "hpc-help@ucdavis.edu"} | overrides))


def people_sections(hippo_server: FakeHippo, iam_server: FakeIAM,
                    sink: SmtpSink) -> dict[str, Any]:
    """The hippo/ucdiam/mail/alerts config sections as YAML-ready data."""
    return {
        "hippo": {"base_url": hippo_server.url, "api_key": HIPPO_KEY, **FAST,
                  "site_aliases": {"CaesFarm": "farm"}},
        "ucdiam": {"base_url": iam_server.url, "api_key": IAM_KEY, **FAST},
        "mail": {"transport": "smtp", "from_address": "hpc-help@example.org",
                 "smtp": {"host": "127.0.0.1", "port": sink.port}},
        "alerts": {"to": ["hpc-ops@example.org"]},
    }


@pytest.fixture
def people_cli_config(cli_config: Path, fake_hippo_server: FakeHippo,
                      fake_iam_server: FakeIAM, smtp_server: SmtpSink) -> Path:
    """The CLI config (this module's database) plus hippo, ucdiam, mail and alerts."""
    data = YAML(typ="safe").load(cli_config.read_text())
    data |= people_sections(fake_hippo_server, fake_iam_server, smtp_server)
    path = cli_config.with_name("people.yaml")
    buffer = io.StringIO()
    YAML(typ="safe").dump(data, buffer)
    path.write_text(buffer.getvalue())
    return path

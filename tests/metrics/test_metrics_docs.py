"""docs/metrics.md keeps up with the code: its table lists every family of
``names.SPECS`` with its kind and labels (and nothing else), and every alert of the
shipped rules has a section saying what it means and what to do.

The table is written in the page, not generated at build time, so that it reads the
same on the repository's web view; this test is what keeps it from going stale."""

from __future__ import annotations

import re

import yaml

from cheeto_like.metrics.names import SPECS
from tests.metrics.promql import PROMETHEUS_DIR, REPO

PAGE = REPO / "docs" / "metrics.md"
ROW = re.compile(r"^\| `(cheeto_[a-z0-9_]+)` \| (\w+) \| ([^|]*) \|", re.MULTILINE)


def test_the_table_lists_every_family_with_its_kind_and_labels() -> None:
    rows = {name: (kind, labels.strip()) for name, kind, labels in ROW.findall(PAGE.read_text())}
    expected = {name: (spec.kind, ", ".join(spec.labels) or "-")
                for name, spec in SPECS.items()}
    assert rows == expected


def test_every_alert_has_a_section() -> None:
    text = PAGE.read_text()
    headings = set(re.findall(r"^### (.+)$", text, re.MULTILINE))
    documented = {word for heading in headings for word in heading.split()
                  if word.startswith("Cheeto")}
    doc = yaml.safe_load((PROMETHEUS_DIR / "cheeto-rules.yml").read_text())
    alerts = {rule["alert"] for group in doc["groups"] for rule in group["rules"]
              if "alert" in rule}
    assert alerts == documented

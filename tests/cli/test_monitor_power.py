"""``cheeto monitor power`` against a fake ``ipmitool`` on PATH that prints what a BMC
prints (and fails once, and then prints nonsense), counting its calls."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cheeto_like.adapters.ipmi import parse_power_reading

DCMI = """
    Instantaneous power reading:                   {watts} Watts
    Minimum during sampling period:                 20 Watts
    Maximum during sampling period:                420 Watts
    Average power reading over sample period:      208 Watts
    IPMI timestamp:                           Tue Dec  1 03:00:00 2026
    Sampling period:                          00000001 Seconds.
    Power reading state is:                   activated

"""


@pytest.fixture
def fake_ipmitool(tmp_path: Path, monkeypatch) -> Path:
    """Readings 210, then a BMC error (exit 1), then 215.5, then output without a
    reading; it logs its arguments."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls"
    script = bindir / "ipmitool"
    script.write_text(f"""#!/bin/sh
echo "$*" >> {calls}
n=$(wc -l < {calls})
case $n in
  1) cat <<'EOT'
{DCMI.format(watts=210)}
EOT
  ;;
  2) echo "Error: Unable to establish IPMI v2 / RMCP+ session" >&2; exit 1 ;;
  3) cat <<'EOT'
{DCMI.format(watts="215.5")}
EOT
  ;;
  *) echo "Power reading state is: deactivated" ;;
esac
""")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    return calls


LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00, (\S+)$")


def test_parser_reads_only_the_instantaneous_line():
    assert parse_power_reading(DCMI.format(watts=123)) == 123.0
    with pytest.raises(ValueError):
        parse_power_reading("Average power reading over sample period: 208 Watts")


async def test_polls_appends_lines_and_survives_a_failed_reading(cli, fake_ipmitool, tmp_path):
    out = tmp_path / "power.csv"
    out.write_text("# earlier\n")
    result = await cli("monitor", "power", "--interval", "0.05", "--count", "4", "-o", str(out))
    assert result.code == 0, result.stderr
    lines = out.read_text().splitlines()
    assert lines[0] == "# earlier"  # appended, never truncated
    assert [LINE.fullmatch(line)[1] for line in lines[1:]] == ["210", "215.5"]
    assert fake_ipmitool.read_text().splitlines() == ["dcmi power reading"] * 4
    warnings = [ln for ln in result.error_lines if "no reading" in ln]
    assert len(warnings) == 2
    assert "Unable to establish IPMI" in warnings[0]
    assert "no 'Instantaneous power reading" in warnings[1]


async def test_stdout_by_default(cli, fake_ipmitool):
    result = await cli("monitor", "power", "--interval", "0.05", "--count", "1")
    assert result.code == 0 and LINE.fullmatch(result.stdout.strip())[1] == "210"


async def test_missing_ipmitool_and_bad_flags_are_one_line(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    missing = await cli("monitor", "power", "--count", "1")
    assert missing.code == 1 and "ipmitool is not installed" in missing.stderr
    assert len(missing.error_lines) == 1
    bad = await cli("monitor", "power", "--interval", "0")
    assert bad.code == 2 and "interval" in bad.stderr
    nodir = await cli("monitor", "power", "--count", "1", "-o", str(tmp_path / "no" / "f"))
    assert nodir.code == 2


@given(st.text(max_size=400))
def test_power_parser_reads_a_number_or_refuses(text):
    """Any output: a finite, non-negative reading or a ValueError, nothing else."""
    try:
        watts = parse_power_reading(text)
    except ValueError:
        return
    assert watts >= 0 and math.isfinite(watts)


def test_an_absurd_reading_is_refused():
    with pytest.raises(ValueError, match="impossible"):
        parse_power_reading(f"Instantaneous power reading: {'9' * 400} Watts")


@given(st.integers(min_value=0, max_value=10**9))
def test_power_parser_round_trips_any_reading(watts):
    assert parse_power_reading(DCMI.format(watts=watts)) == watts

"""Makes the service fixtures available to the tests in this directory.

Also prints each started service's bring-up time at the end of the run, so slow
start-ups show up in CI logs without anyone having to ask.
"""

from __future__ import annotations

import pytest

from .fixtures import BRING_UP_TIMES, rabbitmq, slapd, slurm_accounting, slurm_cluster

__all__ = ["rabbitmq", "slapd", "slurm_accounting", "slurm_cluster"]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line per service started in this session: total and per-step seconds."""
    if not BRING_UP_TIMES:
        return
    terminalreporter.section("service bring-up times")
    for name, (total, steps) in BRING_UP_TIMES.items():
        detail = ", ".join(f"{step} @{at:.2f}s" for step, at in steps.items())
        terminalreporter.write_line(f"{name}: {total:.2f}s ({detail})")

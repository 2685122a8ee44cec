"""A test-only task that records one metric in whichever pool child runs it, and the
``cheeto`` CLI with it registered (as ``tests/daemon/long_task.py`` does for its task).

``metric_tick(seconds)`` adds 1 to ``cheeto_usage_ingest_rows_total{site="tick",
outcome="inserted"}``, holds its pool child ``seconds`` (so a burst spreads over every
child) and returns the child's pid. It is a plain Celery task, not ``run_task``: runs
of one task would otherwise wait on the task's lease instead of running side by side.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from cheeto_like import metrics
from cheeto_like.daemon import config as daemon_table
from cheeto_like.daemon import tasks

NAME = "metric_tick"
SPEC = daemon_table.TaskSpec(NAME, "reap", "metric-tick", per_site=False)
CELERY_NAME = SPEC.celery_name


def metric_tick(self: Any, seconds: float = 1.0) -> dict[str, Any]:
    metrics.inc("cheeto_usage_ingest_rows_total", site="tick", outcome="inserted")
    time.sleep(seconds)
    return {"pid": os.getpid()}


def register() -> None:
    daemon_table.TASKS[NAME] = SPEC
    daemon_table.BY_CELERY_NAME[CELERY_NAME] = SPEC
    tasks.FUNCTIONS[NAME] = metric_tick


REPO = Path(__file__).resolve().parents[2]
PROGRAM = (sys.executable, "-c",
           f"import sys; sys.path.insert(0, {str(REPO)!r}); "
           "from tests.metrics.metric_task import cli; sys.exit(cli(sys.argv[1:]))")


def cli(args: list[str]) -> int:
    register()
    from cheeto_like.cli import main

    return main(args)

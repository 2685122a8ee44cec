"""Store metrics of the write path (issue 30), recorded in a process that turned metrics
on (``tests/operations/metrics_child.py``, a subprocess: activating metrics here would
leave them on for the rest of the session): command latencies by command name,
transaction retries by reason, write conflicts. Failures are injected with the store's
``failCommand`` fail point, as mongod's test setup does."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cheeto_like.models import Group, History
from cheeto_like.store import CommandTimer, Store

CHILD = Path(__file__).with_name("metrics_child.py")
ROOT = Path(__file__).resolve().parents[2]


async def test_retries_conflicts_and_command_latencies_are_counted(db: Store, mongo_config):
    if mongo_config.uri is not None:
        pytest.fail("the metrics child reaches the embedded store only")
    assert mongo_config.embedded is not None
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, str(CHILD), str(mongo_config.embedded.path),
                         db.database.name, "91000"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["timers"] == 1
    assert seen["transient"] == 2  # each injected WriteConflict re-ran the transaction
    assert seen["conflicts"] == 2
    assert seen["unknown_commit"] == 2  # each unknown commit result: the commit again
    timed = seen["timed"]
    assert timed["commitTransaction"] >= 2 + 2  # two commits that stood, two sent again
    assert timed["find"] >= 1 and timed["insert"] >= 2 and timed["bulkWrite"] >= 2
    # and the operations applied once each, with their History rows
    names = sorted(g.name for g in await Group.find(
        {"name": {"$in": ["conflicted", "uncertain"]}}).to_list())
    assert names == ["conflicted", "uncertain"]
    assert await History.find({"op": "create_group", "author": "metrics-child"}).count() == 2


async def test_a_process_without_metrics_times_nothing(db: Store):
    """The CLI, the tests and the benches: no listener on their clients at all."""
    assert not any(isinstance(x, CommandTimer) for x in db.client.options.event_listeners)


def test_command_labels_are_a_bounded_set():
    assert CommandTimer.label("find") == "find"
    assert CommandTimer.label("commitTransaction") == "commitTransaction"
    assert CommandTimer.label("configureFailPoint") == "other"
    assert CommandTimer.label("drop_everything_x") == "other"

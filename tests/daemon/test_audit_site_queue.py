"""The weekly audit reads each site's slurmdbd through that site's queue (issue 25).

Real processes: a hub worker (queue ``cheeto``) started WITHOUT the Slurm client's
environment (its sacctmgr cannot reach the session's slurmdbd), and the head-node worker
of site ``farm`` (queue ``slurm.farm``) with it; site ``away`` has no worker. The hub's
``cheeto.audit`` sends ``cheeto.audit_slurm_state`` to both site queues, the farm worker
reads the real slurmdbd (``slurm_accounting``) and answers with its findings, and the
audit records "site away did not answer" as an ``audit_incomplete`` finding instead of
waiting for ever or reading slurmdbd from the hub.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from cheeto_like.config import load_config
from cheeto_like.daemon.app import make_app
from cheeto_like.models import AuditRun
from cheeto_like.operations import slurm as slurm_ops
from cheeto_like.queries.audit import run_findings
from cheeto_like.store import Store
from tests.conftest import module_database, seed_access_status, wipe
from tests.factories import AUTHOR, make_site
from tests.services.rabbitmq import RabbitMQ
from tests.services.slurm import SlurmAccounting

from .celery_harness import DaemonProcess, mongo_block, node, wait_until_consuming, write_config

CLUSTER = "audqfarm"  # unique in the session's slurmdbd
STRAY = "audqstray"  # an account slurmdbd has and no store record explains
SITE_TIMEOUT = 30


@pytest.fixture(scope="module")
async def sites(store: Store, slurm_accounting: SlurmAccounting) -> Store:
    await wipe()
    await seed_access_status()
    await make_site(store, "farm", "farm.hpc.example.org")
    await make_site(store, "away", "away.hpc.example.org")
    await slurm_ops.SetSiteSlurmCluster.run(store, AUTHOR, site="farm", cluster_name=CLUSTER)
    slurm_accounting.add_cluster(CLUSTER)
    slurm_accounting.sacctmgr("-i", "add", "account", STRAY, f"cluster={CLUSTER}")
    return store


@pytest.fixture(scope="module")
def config(sites: Store, rabbitmq: RabbitMQ, mongo_config, request,
           tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("audit-sites")
    daemon: dict[str, Any] = {
        "broker_url": rabbitmq.vhost_url(module_database(request)), "sites": ["farm", "away"],
        "task_time_limit": 300,
        "tasks": {"slurm_sync": {"apply": False},  # the site worker's sacctmgr settings
                  "audit": {"slurm": True, "ldap": False,
                            "site_timeout_seconds": SITE_TIMEOUT,
                            # what the hub would have used before: it must not be run
                            "sacctmgr": str(base / "no-sacctmgr-on-the-hub")}}}
    path = write_config(base / "config.yaml",
                        mongo_block(mongo_config, module_database(request)), daemon)
    path.write_text(path.read_text() + "audit: {}\n")  # an unprofiled section
    return path


async def test_the_audit_reads_each_site_through_its_queue(
        sites, config: Path, slurm_accounting: SlurmAccounting, tmp_path: Path):
    app = make_app(load_config(config))
    hub_name, farm_name = node("cheeto-hub-aud@%h"), node("slurm-farm-aud@%h")
    hub = DaemonProcess(["worker", "--name", "cheeto-hub-aud@%h"], config,
                        tmp_path / "hub.log")
    farm = DaemonProcess(["worker", "--site", "farm", "--name", "slurm-farm-aud@%h"], config,
                         tmp_path / "farm.log", env=slurm_accounting.env)
    try:
        wait_until_consuming(app, {hub_name: hub, farm_name: farm})
        sent = app.send_task("cheeto.audit", queue="cheeto")
        outcome = await asyncio.to_thread(sent.get, timeout=SITE_TIMEOUT + 120, interval=0.2)
        farm_log = farm.output()
        hub_log = hub.output()
    finally:
        hub.kill()
        farm.kill()
        app.close()

    assert outcome["status"] == "ok", outcome
    sources = outcome["sources"]
    assert sources["slurm:farm"] == "ok", sources
    assert sources["slurm:away"].startswith(
        f"site away did not answer within {SITE_TIMEOUT}s"), sources
    assert "slurm.away" in sources["slurm:away"]

    run = await AuditRun.get(outcome["run_id"])
    assert run is not None
    findings, _ = await run_findings(run)
    assert any(f["kind"] == "slurm_unexplained" and f["site"] == "farm"
               and STRAY in f["object"] for f in findings), findings
    [incomplete] = [f for f in findings if f["kind"] == "audit_incomplete"]
    assert incomplete["site"] == "away" and "did not answer" in incomplete["detail"]

    # the farm read ran on the farm's head-node worker (Celery logs "Task NAME[id] ..."),
    # never on the hub
    assert "cheeto.audit_slurm_state[" in farm_log, farm_log
    assert "cheeto.audit_slurm_state[" not in hub_log, hub_log
    assert "no-sacctmgr-on-the-hub" not in hub_log + farm_log

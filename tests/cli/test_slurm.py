"""`cheeto ng slurm …` and the site's Slurm settings, end to end through the entry point;
`ng slurm sync` and `ng slurm why` against the session's real slurmdbd."""

from __future__ import annotations

import itertools

import pytest

from cheeto_like.models import History, SlurmAllocation, SlurmAssociation, SlurmQOS
from tests.services.slurm import SlurmAccounting

_n = itertools.count(1)


async def ok(cli, *argv: str, **kw):
    r = await cli(*argv, **kw)
    assert r.code == 0, (argv, r.stderr)
    return r


@pytest.fixture
async def farm(cli, db):
    site = f"cl{next(_n)}"
    await ok(cli, "ng", "site", "new", "-s", site, "--fqdn", f"{site}.example.org")
    await ok(cli, "ng", "group", "new", "generic", "-g", f"{site}lab", "--gid",
             str(70000 + next(_n)))
    for i in range(2):
        name = f"{site}u{i}"
        await ok(cli, "ng", "user", "new", "generic", "-u", name, "--email",
                 f"{name}@example.org", "--fullname", "U Ser", "--uid", str(80000 + next(_n)),
                 "--access", "login-ssh", "slurm")
        await ok(cli, "ng", "user", "add", "site", "-u", name, "-s", site)
        await ok(cli, "ng", "group", "add", "member", "-g", f"{site}lab", "-u", name, "-s", site)
    return site


async def test_partitions_qos_accounts_associations(cli, farm):
    lab = f"{farm}lab"
    await ok(cli, "ng", "slurm", "partition", "new", "-s", farm, "-n", "gpu")
    r = await cli("ng", "slurm", "partition", "new", "-s", farm, "-n", "gpu")
    assert r.code == 2 and "already exists" in r.stderr
    await ok(cli, "ng", "slurm", "qos", "new", "-s", farm, "-n", "q1", "--group-limits",
             "cpus=8", "gpus=2", "mem=16G", "--user-limits", "cpus=4 mem=inf", "--priority", "5")
    r = await cli("ng", "slurm", "qos", "new", "-s", farm, "-n", "q2", "--group-limits",
                  "cpus=8 disks=2")
    assert r.code == 2 and "invalid TRES 'disks=2'" in r.stderr
    r = await cli("ng", "slurm", "qos", "new", "-s", farm, "-n", "q2", "--flags", "Fast")
    assert r.code == 2 and "QOS flag 'Fast'" in r.stderr
    assert await SlurmQOS.find({"name": "q2"}).count() == 0
    data = (await ok(cli, "ng", "slurm", "qos", "show", "-s", farm, "-n", "q1", "--json")).json()
    assert data["group_limits"] == "8c/2g/16384M" and data["user_limits"] == "4c/∞/∞"
    assert data["priority"] == 5 and data["flags"] == ["DenyOnLimit"]

    r = await cli("ng", "slurm", "association", "new", "-g", lab, "-s", farm, "--partition",
                  "gpu", "--qos", "q1")
    assert r.code == 2 and "no Slurm account" in r.stderr
    await ok(cli, "ng", "slurm", "account", "new", "-g", lab, "-s", farm, "--max-user-jobs", "10",
             "--max-job-length", "7-0", "--coordinator", f"{farm}u0")
    await ok(cli, "ng", "slurm", "assoc", "new", "-g", lab, "-s", farm, "--partition", "gpu",
             "--qos", "q1")
    r = await cli("ng", "slurm", "assoc", "new", "-g", lab, "-s", farm, "--partition", "gpu",
                  "--qos", "q1")
    assert r.code == 2 and "already has QOS" in r.stderr
    r = await cli("ng", "slurm", "assoc", "new", "-g", lab, "-s", farm, "--partition", "cpu",
                  "--qos", "q1")
    assert r.code == 2 and "partition 'cpu' does not exist" in r.stderr
    rows = (await ok(cli, "ng", "slurm", "association", "show", "-s", farm, "--json")).json()
    assert rows == [{"account": lab, "partition": "gpu", "qos": ["q1"], "default_qos": "q1"}]
    account = (await ok(cli, "ng", "slurm", "account", "show", "-g", lab, "-s", farm,
                        "--yaml")).yaml()
    assert account["limits"]["max_job_length"] == "7-0"
    assert account["coordinators"] == [f"{farm}u0"]

    user = (await ok(cli, "ng", "user", "show", "-u", f"{farm}u1", "-s", farm, "--json")).json()
    assert user["site"]["slurm"] == [{"account": lab, "via": ["member"], "associations": [
        {"partition": "gpu", "qos": ["q1"], "default_qos": "q1"}]}]
    group = (await ok(cli, "ng", "group", "show", "-g", lab, "-s", farm, "--json")).json()
    assert group["site"]["slurm"]["associations"][0]["partition"] == "gpu"

    r = await cli("ng", "slurm", "qos", "remove", "-s", farm, "-n", "q1")
    assert r.code == 2 and "--force" in r.stderr
    await ok(cli, "ng", "slurm", "qos", "rm", "-s", farm, "-n", "q1", "--force")
    assert await SlurmAssociation.find({"site": farm}).count() == 0
    assert await SlurmAllocation.find({"site": farm}).count() == 0


async def test_allocations_and_provision(cli, farm):
    lab = f"{farm}lab"
    await ok(cli, "ng", "slurm", "partition", "new", "-s", farm, "-n", "gpu")
    await ok(cli, "ng", "slurm", "provision", "-g", lab, "-s", farm, "--partition", "gpu",
             "--group-limits", "cpus=16")
    await ok(cli, "ng", "slurm", "provision", "-g", lab, "-s", farm, "--partition", "gpu")
    qos = f"{lab}-gpu-qos"
    assert await SlurmAssociation.find({"site": farm}).count() == 1
    await ok(cli, "ng", "slurm", "allocation", "add", "-s", farm, "--qos", qos, "--field",
             "group_limits", "--tres", "cpus=8 gpus=1", "--expires-at", "+30d")
    rows = (await ok(cli, "ng", "slurm", "alloc", "list", "-s", farm, "-g", lab,
                     "--json")).json()
    assert len(rows) == 2 and {r["bucket"] for r in rows} == {"group_limits"}
    data = (await ok(cli, "ng", "slurm", "qos", "show", "-s", farm, "-n", qos, "--json")).json()
    assert data["group_limits"] == "24c/1g/∞"
    newest = next(r for r in rows if r["expires_at"])
    await ok(cli, "ng", "slurm", "allocation", "edit", "--id", newest["id"], "--expires-at",
             "clear", "--tres", "cpus=2")
    data = (await ok(cli, "ng", "slurm", "qos", "show", "-s", farm, "-n", qos, "--json")).json()
    assert data["group_limits"] == "18c/∞/∞"
    await ok(cli, "ng", "slurm", "allocation", "remove", "--id", newest["id"])
    r = await cli("ng", "slurm", "allocation", "remove", "--id", newest["id"])
    assert r.code == 2 and "does not exist" in r.stderr
    ops = [h.op for h in await History.find({}).to_list()]
    assert "provision_slurm_allocation" in ops and "edit_slurm_allocation" in ops


async def test_site_sticky_slurm_and_default(cli, farm):
    lab = f"{farm}lab"
    r = await cli("ng", "site", "slurm", "set-default", "-s", farm, "-g", lab)
    assert r.code == 2 and "no Slurm account" in r.stderr
    await ok(cli, "ng", "slurm", "account", "new", "-g", lab, "-s", farm)
    await ok(cli, "ng", "site", "slurm", "set-default", "-s", farm, "-g", lab)
    site = (await ok(cli, "ng", "site", "show", "-s", farm, "--json")).json()
    assert site["slurm"]["sticky_accounts"] == [lab] and site["slurm"]["default_account"] == lab
    r = await cli("ng", "site", "sticky", "remove", "slurm", "-s", farm, "-g", lab)
    assert r.code == 2 and "--clear-default" in r.stderr
    await ok(cli, "ng", "site", "sticky", "remove", "slurm", "-s", farm, "-g", lab,
             "--clear-default")
    await ok(cli, "ng", "site", "sticky", "add", "slurm", "-s", farm, "-g", lab, "--default")
    await ok(cli, "ng", "site", "slurm", "clear-default", "-s", farm)
    await ok(cli, "ng", "site", "slurm", "set-cluster", "-s", farm, "--cluster-name", "other")
    site = (await ok(cli, "ng", "site", "show", "-s", farm, "--json")).json()
    assert site["slurm"]["cluster_name"] == "other" and site["slurm"]["default_account"] is None


@pytest.fixture
def slurm_env(slurm_accounting: SlurmAccounting, monkeypatch):
    """The CLI finds sacctmgr through the environment, as on a head node."""
    for key, value in slurm_accounting.env.items():
        monkeypatch.setenv(key, value)
    return slurm_accounting


async def test_sync_dry_run_apply_json_and_why(cli, farm, slurm_env, tmp_path):
    lab = f"{farm}lab"
    slurm_env.add_cluster(farm)
    await ok(cli, "ng", "slurm", "partition", "new", "-s", farm, "-n", "gpu")
    await ok(cli, "ng", "slurm", "provision", "-g", lab, "-s", farm, "--partition", "gpu",
             "--group-limits", "cpus=16 mem=64G")
    r = await ok(cli, "ng", "slurm", "sync", "-s", farm)
    assert "DRY-RUN" in r.stderr and f"add user {farm}u0,{farm}u1 account={lab}" in r.stderr
    assert r.stdout == ""
    dump = tmp_path / "cmds.txt"
    r = await ok(cli, "ng", "slurm", "sync", "-s", farm, "--json", "--dump-commands", str(dump))
    data = r.json()
    assert data["mode"].startswith("DRY-RUN") and data["deletions"] == 0
    assert data["processes"] == len(dump.read_text().splitlines())
    r = await ok(cli, "ng", "slurm", "sync", "-s", farm, "--apply")
    assert "APPLIED" in r.stderr and "0 failed" in r.stderr
    # piped (no terminal): each line's outcome is a word, never raw markup (issue 28)
    assert f"  ok sacctmgr -i add user {farm}u0,{farm}u1" in r.stderr
    assert "[green]" not in r.stderr and "[/]" not in r.stderr

    why = (await ok(cli, "ng", "slurm", "why", "-s", farm, "-u", f"{farm}u0", "--json")).json()
    assert why["can_submit"] is True and why["slurmdbd"]["missing"] == []
    assert why["last_sync"]["status"] == "ok"
    assert any(c["batch"] == "add associations" for c in why["last_sync"]["commands_for_user"])
    r = await ok(cli, "ng", "slurm", "sync", "-s", farm, "--json")
    assert r.json()["processes"] == 0
    await ok(cli, "ng", "user", "status", "-u", f"{farm}u0", "--status", "inactive", "--reason",
             "x")
    why = (await ok(cli, "ng", "slurm", "why", "-s", farm, "-u", f"{farm}u0", "--json")).json()
    # slurmdbd still holds the association (no slurmctld here): they can submit until the
    # next sync, and the answer says so (issue 11, item 4)
    assert why["slurmctld"]["checked"] is False
    assert why["can_submit"] is True and why["verdict_from"] == "slurmdbd"
    assert why["wanted"]["can_submit"] is False
    assert "the next sync removes it" in why["summary"]
    assert why["eligibility"]["blocked_by"] == ["status is inactive"]
    assert why["slurmdbd"]["unexpected"] == [f"{farm}u0@{lab}/gpu"]

    r = await cli("ng", "slurm", "sync", "-s", farm, "--apply", "--max-deletions", "0")
    assert r.code == 1 and "more than --max-deletions 0" in r.stderr
    assert f"{farm}u0@{lab}/gpu" in r.stderr


async def test_sync_offline_dump_mode(cli, farm, slurm_env, tmp_path):
    slurm_env.add_cluster(farm)
    await ok(cli, "ng", "slurm", "partition", "new", "-s", farm, "-n", "gpu")
    await ok(cli, "ng", "slurm", "provision", "-g", f"{farm}lab", "-s", farm, "--partition",
             "gpu")
    await ok(cli, "ng", "slurm", "sync", "-s", farm, "--apply")
    files = {}
    from cheeto_like.sync.slurm.actual import READS
    for what, args in READS.items():
        out = slurm_env.sacctmgr("-i", "-P", "-n", *args(farm)).stdout
        files[what] = tmp_path / f"{what}.txt"
        files[what].write_text(out)
    argv = [x for what, path in files.items() for x in (f"--from-{what}-dump", str(path))]
    r = await ok(cli, "ng", "slurm", "sync", "-s", farm, "--json", *argv)
    assert r.json()["processes"] == 0 and "offline" in r.json()["mode"]
    r = await cli("ng", "slurm", "sync", "-s", farm, "--apply", *argv)
    assert r.code == 2 and "cannot be combined with --apply" in r.stderr


async def test_sync_without_sacctmgr_is_one_clear_line(cli, farm, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    r = await cli("ng", "slurm", "sync", "-s", farm)
    assert r.code == 1
    assert r.error_lines[-1].startswith("error: sacctmgr not found on PATH")


async def test_sync_and_why_take_a_sacctmgr_path(cli, farm, slurm_env, tmp_path):
    """`--sacctmgr PATH` like the daemon's `slurm_sync.sacctmgr` (issue 11, item 7)."""
    slurm_env.add_cluster(farm)
    await ok(cli, "ng", "slurm", "partition", "new", "-s", farm, "-n", "gpu")
    await ok(cli, "ng", "slurm", "provision", "-g", f"{farm}lab", "-s", farm, "--partition",
             "gpu")
    log = tmp_path / "calls.log"
    wrapper = tmp_path / "my-sacctmgr"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec sacctmgr "$@"\n')
    wrapper.chmod(0o755)
    await ok(cli, "ng", "slurm", "sync", "-s", farm, "--apply", "--sacctmgr", str(wrapper))
    assert any(line.startswith("-i add user") for line in log.read_text().splitlines())
    await ok(cli, "ng", "slurm", "why", "-s", farm, "-u", f"{farm}u0", "--sacctmgr",
             str(wrapper), "--no-slurmctld")
    assert "WOPLimits" in log.read_text()  # why read the limits through it too
    r = await cli("ng", "slurm", "sync", "-s", farm, "--sacctmgr", str(tmp_path / "nope"))
    assert r.code == 1 and "not found" in r.stderr and "Traceback" not in r.stderr

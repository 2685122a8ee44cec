"""The access audit against the real services it reads: the store, a real slapd (the LDAP
reconciler's dry run), a real slurmdbd (the Slurm reconciler's dry run) and the puppet
root-key export; its digest through a real SMTP sink and a local chat webhook sink."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from cheeto_like.adapters.sacctmgr import SAcctMgr
from cheeto_like.config import AuditConfig, Config
from cheeto_like.models import ApiKey, GroupMembership, SlurmAllocation
from cheeto_like.operations.group_membership import AddGroupMember, AddGroupSponsor
from cheeto_like.operations.quota import AdjustUsage, SetQuota
from cheeto_like.operations.user import RemoveUserAccess, SetUserStatus
from cheeto_like.sync.audit import run_audit
from cheeto_like.sync.slurm.actual import SAcctMgrReader
from tests.factories import AUTHOR, make_group, make_user
from tests.services.fixtures_people import mail_config
from tests.sync.ldap_lab import Lab


@pytest.fixture
async def world(db, slapd, slurm_accounting):
    """One site in LDAP (synced) and in slurmdbd, with one of each problem."""
    lab = Lab(db, slapd)
    await lab.make_sites()
    site = lab.site
    slurm_accounting.add_cluster(site)
    n = {k: lab.name(k) for k in ("alice", "bob", "carol", "grp")}
    await make_user(db, n["alice"], site=site, access=["login-ssh", "slurm", "sudo"])
    await make_user(db, n["bob"], site=site, access=["login-ssh", "sudo"])
    await make_user(db, n["carol"])  # on no site
    await make_group(db, n["grp"])
    await AddGroupMember.run(db, AUTHOR, group=n["grp"], user=n["alice"], site=site)
    await AddGroupSponsor.run(db, AUTHOR, group=n["grp"], user=n["bob"], site=site)
    await lab.sync()  # LDAP as the store wants it (bob still active)
    await SetUserStatus.run(db, AUTHOR, name=n["bob"], status="inactive", reason="left",
                            site=site)
    # carol is a member at a site she is not on (written past the operations' checks)
    await GroupMembership(user=n["carol"], group=n["grp"], site=site,
                          roles=["member"]).insert()
    expired = datetime.now(UTC) - timedelta(days=3)
    await SlurmAllocation(site=site, qos=f"{n['grp']}-q", bucket="group_limits",
                          expires_at=expired).insert()
    now = int(time.time())
    await ApiKey(name=f"puppet{lab.k}", scopes=["puppet:read"], prefix="ck_abc",
                 fingerprint=f"fp{lab.k}", rotated_epoch=now - 200 * 86400,
                 last_used_epoch=now - 3600).insert()
    await SetQuota.run(db, AUTHOR, site=site, user=n["alice"], cpu_minutes=10)
    await AdjustUsage.run(db, AUTHOR, site=site, user=n["alice"], cpu_minutes=20,
                          reason="test debit")
    # slurmdbd: an account and an association no store record explains
    slurm_accounting.sacctmgr("-i", "add", "account", f"ghost{lab.k}", f"cluster={site}")
    slurm_accounting.sacctmgr("-i", "add", "user", n["bob"], f"account=ghost{lab.k}",
                              f"cluster={site}")
    return lab, n, slurm_accounting


async def _audit(db, lab, accounting, **kwargs):
    reader = SAcctMgrReader(SAcctMgr(env=accounting.env, timeout=30))
    return await run_audit(db, sites=[lab.site], slurm=reader, ldap=lab.config,
                           author=AUTHOR, **kwargs)


def kinds(report) -> dict[str, list]:
    found: dict[str, list] = {}
    for f in report.findings:
        found.setdefault(f.kind, []).append(f)
    return found


async def test_each_kind_of_finding_with_its_severity_object_and_fix(db, world):
    lab, n, accounting = world
    site = lab.site
    report = await _audit(db, lab, accounting)
    assert report.sources == {"store": "ok", f"slurm:{site}": "ok", f"ldap:{site}": "ok"}
    by = kinds(report)
    # inactive people still holding access: in slurmdbd, in LDAP, in the store's grants
    [slurm] = by["inactive_in_slurm"]
    assert slurm.severity == "critical" and slurm.object == f"{n['bob']}@ghost{lab.k}/"
    assert slurm.fix == f"cheeto ng slurm sync -s {site} --apply"
    ldap = {f.object.split(" ", 1)[1] for f in by["inactive_in_ldap"]}
    assert f"memberUid={n['bob']}" in ldap
    assert all(f.fix == f"cheeto ng ldap sync-site -s {site} --full"
               for f in by["inactive_in_ldap"])
    [priv] = by["inactive_holds_privilege"]
    assert (priv.severity, priv.object) == ("high", n["bob"])
    assert priv.fix == f"cheeto ng user remove access -u {n['bob']} -s {site} -a sudo"
    [role] = by["inactive_holds_role"]
    assert role.fix == f"cheeto ng group remove sponsor -g {n['grp']} -u {n['bob']} -s {site}"
    # memberships at a site the user is not on; a group without an active sponsor
    [off] = by["membership_off_site"]
    assert off.object == f"{n['carol']}@{n['grp']}" and off.severity == "medium"
    [sponsor] = by["no_active_sponsor"]
    assert sponsor.object == n["grp"] and "none active" in sponsor.detail
    # the review list: alice's sudo (info)
    assert [(f.object, f.severity) for f in by["privileged"]] == [(n["alice"], "info")]
    # drift no store record explains: the account in slurmdbd
    assert [f.object for f in by["slurm_unexplained"]] == [f"account ghost{lab.k}"]
    # expired allocation still counted (no applied sync since), key past rotation, quota
    [alloc] = by["expired_allocation_counted"]
    assert alloc.severity == "high" and "still counts" in alloc.detail
    [key] = by["api_key_past_rotation"]
    assert key.object.startswith(f"puppet{lab.k}") and key.site is None
    assert key.fix == f"cheeto ng apikey rotate --name puppet{lab.k}"
    [quota] = by["over_quota"]
    assert quota.object == f"user {n['alice']}" and "cpu 200%" in quota.detail
    assert all(f.status == "new" for f in report.findings)
    # most severe first
    ranks = [("info", "low", "medium", "high", "critical").index(f.severity)
             for f in report.findings]
    assert ranks == sorted(ranks, reverse=True)


async def test_the_next_audit_marks_new_ongoing_and_resolved(db, world):
    lab, n, accounting = world
    first = await _audit(db, lab, accounting)
    await RemoveUserAccess.run(db, AUTHOR, name=n["bob"], access=["sudo"], site=lab.site)
    await make_user(db, lab.name("dave"))
    await GroupMembership(user=lab.name("dave"), group=n["grp"], site=lab.site,
                          roles=["sudoer"]).insert()
    second = await _audit(db, lab, accounting)
    assert second.previous_at == first.started_at
    status = {f.key: f.status for f in second.findings}
    assert status[f"membership_off_site|{lab.site}|{lab.name('dave')}@{n['grp']}"] == "new"
    assert status[f"membership_off_site|{lab.site}|{n['carol']}@{n['grp']}"] == "ongoing"
    assert [f.kind for f in second.resolved] == ["inactive_holds_privilege"]
    assert second.resolved[0].status == "resolved"
    # LDAP's sudo-users listing of bob was a finding from the first audit on (inactive
    # at the site, his access groups are to drop him: queries.access_policy), and stays
    # one until synced, sudo recorded or not
    new = {(f.kind, f.object.split(",", 1)[0]) for f in second.findings if f.status == "new"}
    assert new == {("membership_off_site", f"{lab.name('dave')}@{n['grp']}")}
    ongoing = {(f.kind, f.object.split(",", 1)[0]) for f in second.findings
               if f.status == "ongoing"}
    assert ("inactive_in_ldap", "cn=sudo-users") in ongoing
    assert second.counts()["resolved"] == 1 and second.counts()["new"] == 1
    from cheeto_like.models import AuditRun

    runs = await AuditRun.find({"scope": lab.site}).to_list()
    assert len(runs) == 2
    stored = next(r for r in runs if r.id == second.run_id)
    from cheeto_like.models import AuditFinding
    from cheeto_like.queries.audit import run_findings

    findings, resolved = await run_findings(stored)
    assert stored.counts == second.counts() and len(findings) == len(second.findings)
    assert [f["key"] for f in findings] == [f.key for f in second.findings]
    assert resolved[0]["kind"] == "inactive_holds_privilege"
    # one document per finding (none of them on the run), each under the 16 MiB limit
    assert await AuditFinding.find({"run": stored.id}).count() == len(findings) + 1
    raw = await AuditRun.get_pymongo_collection().find_one({"_id": stored.id})
    assert "findings" not in raw and "resolved" not in raw


async def test_an_unreadable_source_is_a_finding(db, world):
    lab, _, _ = world
    broken = SAcctMgrReader(SAcctMgr(binary="/nonexistent/sacctmgr", timeout=5))
    report = await run_audit(db, sites=[lab.site], slurm=broken, ldap=None, author=AUTHOR)
    assert "not found" in report.sources[f"slurm:{lab.site}"]
    assert report.sources[f"ldap:{lab.site}"] == "skipped"
    [incomplete] = kinds(report)["audit_incomplete"]
    assert incomplete.severity == "medium" and incomplete.object == "slurm"


async def test_the_digest_goes_by_mail_and_to_the_chat_webhook(db, world, mailbox, chat):
    from cheeto_like.models import AuditRun, History
    from cheeto_like.operations.audit_digest import deliver

    lab, _, accounting = world
    token = f"T0KEN{lab.k}SECRET"
    config = Config(mail=mail_config(mailbox),
                    audit=AuditConfig(to=["security@example.org"],
                                      webhook_url=chat.url(token)))
    report = await _audit(db, lab, accounting)
    outcome = await deliver(db, AUTHOR, config, report)
    assert outcome == {"email": "sent", "webhook": "sent"}
    [mail] = mailbox.messages
    assert mail.rcpt_tos == ["security@example.org"]
    total = report.counts()["total"]
    assert mail.subject == f"[cheeto audit] {total} finding(s), {total} new, 0 resolved"
    text = mail.text()
    assert "New findings:" in text and f"inactive_in_slurm at {lab.site}" in text
    assert f"cheeto ng slurm sync -s {lab.site} --apply" in text
    [(got_token, body)] = chat.messages
    assert got_token == token and set(body) == {"text"}
    assert "*New*" in body["text"] and "inactive_in_slurm" in body["text"]
    run = await AuditRun.get(report.run_id)
    assert run.delivered == {"email": "sent", "webhook": "sent"}
    sent = await History.find({"op": "send_user_email"}).to_list()
    assert any(h.changes.get("email_type") == "audit_digest" for h in sent)

    # a webhook that refuses: reported, the URL's secret path named nowhere
    chat.fail_next(500)
    outcome = await deliver(db, AUTHOR, Config(audit=AuditConfig(webhook_url=chat.url(token))),
                            report)
    assert outcome == {"webhook": "failed: chat webhook at http://127.0.0.1: HTTP 500"}
    assert token not in json.dumps(outcome)


@pytest.fixture
def slurm_env(world, monkeypatch):
    """The CLI finds sacctmgr through the environment, as on a head node."""
    _, _, accounting = world
    for key, value in accounting.env.items():
        monkeypatch.setenv(key, value)
    return world


async def test_cli_writes_jsonl_and_markdown_and_fails_on_severity(cli, slurm_env, tmp_path):
    lab, n, _ = slurm_env
    jsonl, markdown = tmp_path / "findings.jsonl", tmp_path / "digest.md"
    r = await cli("ng", "audit", "run", "--site", lab.site, "--no-ldap", "--no-send",
                  "--jsonl", str(jsonl), "--markdown", str(markdown), "--fail-on", "critical")
    assert r.code == 1, r.stderr  # inactive_in_slurm is critical
    assert "at or above critical" in r.stderr and "inactive_in_slurm" in r.stderr
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert {"run", "at", "key", "severity", "kind", "site", "object", "detail", "fix",
            "status"} <= set(lines[0])
    assert any(x["kind"] == "inactive_in_slurm" and x["object"].startswith(n["bob"])
               for x in lines)
    assert jsonl.stat().st_mode & 0o777 == 0o600 and markdown.stat().st_mode & 0o777 == 0o600
    assert markdown.read_text().startswith(f"*Access audit of {lab.site}*")

    # the store alone has nothing critical; --json goes to stdout
    r = await cli("ng", "audit", "run", "-s", lab.site, "--no-ldap", "--no-slurm",
                  "--no-send", "--fail-on", "critical", "--json")
    assert r.code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["sources"][f"slurm:{lab.site}"] == "skipped"
    assert data["counts"]["critical"] == 0 and data["counts"]["high"] >= 1
    r = await cli("ng", "audit", "run", "-s", lab.site, "--no-ldap", "--no-slurm",
                  "--no-send", "--fail-on", "info")
    assert r.code == 1

    r = await cli("ng", "audit", "run", "--fail-on", "bad", "--no-send")
    assert r.code == 2 and "Traceback" not in r.stderr
    r = await cli("ng", "audit", "run", "-s", "nowhere", "--no-send")
    assert r.code == 2
    r = await cli("ng", "audit", "run", "-s", lab.site, "--no-send", "--no-slurm",
                  "--no-ldap", "--jsonl", str(tmp_path / "missing" / "x.jsonl"))
    assert r.code == 2 and "cannot write" in r.stderr

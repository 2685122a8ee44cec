"""E-mail templates: every kind renders, the reference's template bug is fixed (real
partitions and QOS, the real home quota, real group storages), values are escaped."""

from __future__ import annotations

import pytest

from cheeto_like.notifications import KINDS, Links, render
from cheeto_like.operations.group_membership import AddGroupMember, AddGroupSponsor
from cheeto_like.operations.slurm import (
    CreateSlurmAccount,
    CreateSlurmAssociation,
    CreateSlurmPartition,
    CreateSlurmQOS,
)
from cheeto_like.operations.storage import CreateGroupStorage, CreateHomeStorage
from cheeto_like.queries.hippo import account_summary
from cheeto_like.queries.site import get_site
from tests.factories import AUTHOR, home_defaults, make_group, make_site, make_user

BASE = {"username": "alice", "sitename": "farm", "sitefqdn": "farm.hpc.ucdavis.edu",
        "groups": [], "slurm_accounts": [], "home": None, "group_storages": []}
VARIABLES = {
    "account_ready": BASE,
    "new_membership": BASE | {"new_groups": ["lab1"]},
    "key_updated": BASE,
    "removed_from_group": BASE | {"group": "lab1", "sponsors": [
        {"name": "Prof P", "email": "prof@ucdavis.edu"}]},
    "new_sponsor": BASE | {"group": "profgrp"},
    "offboarding_warning": {"username": "alice", "deactivation_date": "April 03, 2025"},
    "account_deactivated": {"username": "alice"},
    "account_restored": {"username": "alice"},
    "operator_alert": {"total": 1, "since": "a", "now": "b", "subject_prefix": "[cheeto]",
                       "stuck_after_minutes": 120, "failed_tasks": [], "stuck_tasks": [],
                       "guard_trips": [], "sync_failures": [
                           {"id": "r1", "target": "slurm", "site": "farm",
                            "started_at": "2025-03-01 03:00", "error": "boom"}]},
    "quota_threshold": {"scope": "account", "subject": "lab1", "sitename": "farm",
                        "resource": "CPU", "threshold": 90, "percent": 91.5,
                        "used_hours": "91.5", "quota_hours": "100.0",
                        "period_start": "2026-11-01", "period_end": "2026-12-01"},
    "request_update": {"number": 3, "request_kind": "access", "kind_help": "an access grant",
                       "event": "done", "event_words": "approved and done", "actor": "bob",
                       "summary": "sudo access for alice at farm", "reason": "",
                       "note": "ok", "next_step": "", "status": "done",
                       "due": "2026-12-08 15:00 UTC",
                       "actions": ["add_user_access(name=alice, access=['sudo'], site=farm)"]},
    "audit_digest": {"subject_prefix": "[cheeto audit]", "scope": "farm",
                     "when": "2026-12-01 06:00", "run": "r1", "total": 2, "new": 1,
                     "resolved": 1, "by_severity": "1 high, 1 info",
                     "previous": "2026-11-24 06:00",
                     "new_findings": [{"severity": "high", "kind": "inactive_holds_role",
                                       "site": "farm", "object": "bob@lab_x",
                                       "detail": "inactive but still sponsor of lab_x",
                                       "fix": "cheeto ng group remove sponsor -g lab_x -u bob"
                                              " -s farm"}],
                     "new_more": 0, "resolved_more": 0,
                     "resolved_findings": [{"severity": "info", "kind": "privileged",
                                            "site": "farm", "object": "alice"}],
                     "ongoing": [{"kind": "privileged", "severity": "info", "count": 1}],
                     "sources": "store ok, slurm:farm ok"},
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_renders_text_html_and_paragraphs(kind):
    email = render(kind, ["alice@ucdavis.edu"], **VARIABLES[kind])
    assert email.to == ("alice@ucdavis.edu",) and email.kind == kind
    assert email.subject and email.header and email.text.strip()
    assert email.paragraphs and all(p.startswith("<") for p in email.paragraphs)
    assert email.html == "\n".join(email.paragraphs)
    assert "{{" not in email.text and "**" not in email.text


def test_subjects_follow_the_reference():
    assert render("account_ready", ["a@x.org"], **BASE).subject == \
        "HPC: Account Ready on Farm"
    assert render("new_sponsor", ["a@x.org"], **VARIABLES["new_sponsor"]).header == \
        "New sponsored group <strong>profgrp</strong>"
    assert render("operator_alert", ["ops@x.org"], **VARIABLES["operator_alert"]).subject == \
        "[cheeto] 1 problem(s) need attention"


def test_a_recipient_is_required_and_duplicates_collapse():
    with pytest.raises(ValueError, match="at least one recipient"):
        render("account_restored", [None, " "], username="alice")
    email = render("account_restored", ["A@x.org", "a@x.org"], cc=["a@X.org", "b@x.org"],
                   username="alice")
    assert email.to == ("A@x.org",) and email.cc == ("b@x.org",)


def test_values_are_escaped_for_markdown_and_html():
    email = render("removed_from_group", ["a@x.org"], **BASE | {
        "group": "lab_x_y", "sponsors": [{"name": "<script>x</script>", "email": "p@x.org"}]})
    assert "<em>" not in email.html and "lab_x_y" in email.html
    assert "<script>" not in email.html and "&lt;script&gt;" in email.html
    assert "lab_x_y" in email.text and "<script>x</script>" in email.text  # text is raw


def test_mailto_links_carry_an_encoded_subject():
    email = render("key_updated", ["a@x.org"], links=Links(support_address="help@x.org"),
                   **BASE)
    assert 'href="mailto:help@x.org?subject=SSH%20key%20change%20for%20alice"' \
        in email.html
    assert "ssh alice@farm.hpc.ucdavis.edu" in email.text


async def test_account_e_mails_show_real_slurm_home_and_group_storage(db):
    """The reference printed "partitions"/"qoses", a hard-coded 20GB and no storages."""
    await make_site(db, "farm")
    await home_defaults(db, quota="50G")
    user = await make_user(db, "alice", site="farm")
    prof = await make_user(db, "prof", site="farm")
    await make_group(db, "lab1", 500001)
    for role_op in (AddGroupMember, AddGroupSponsor):
        await role_op.run(db, AUTHOR, group="lab1", user=prof.name, site="farm")
    await AddGroupMember.run(db, AUTHOR, group="lab1", user="alice", site="farm")
    await CreateHomeStorage.run(db, AUTHOR, user="alice", site="farm")
    await CreateGroupStorage.run(db, AUTHOR, group="lab1", site="farm", quota="10T",
                                 host="nas2", host_path="/export/group/lab1")
    for partition in ("high", "low"):
        await CreateSlurmPartition.run(db, AUTHOR, site="farm", name=partition)
    for qos in ("lab1-high-qos", "lab1-low-qos"):
        await CreateSlurmQOS.run(db, AUTHOR, site="farm", name=qos)
    await CreateSlurmAccount.run(db, AUTHOR, site="farm", group="lab1")
    await CreateSlurmAssociation.run(db, AUTHOR, site="farm", group="lab1", partition="high",
                                     qos="lab1-high-qos")
    await CreateSlurmAssociation.run(db, AUTHOR, site="farm", group="lab1", partition="low",
                                     qos="lab1-low-qos")
    summary = await account_summary(user, await get_site("farm"))
    assert summary.groups == ["lab1"]
    assert summary.home.quota == "50G" and summary.home.path == "/home/alice"
    email = render("account_ready", [user.email], **summary.template_vars())
    text = email.text
    assert "account lab1: partition high (QOS lab1-high-qos); partition low (QOS lab1-low-qos)" \
        in text
    assert "partitions" not in text.replace("accounts, partitions", "") and "qoses" not in text
    assert "/home/alice, with a quota of 50G" in text and "20GB" not in text
    assert "lab1 (group lab1): not mounted, quota 10T" in text
    assert "Your groups on farm: lab1." in text

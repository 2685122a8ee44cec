"""Answer "why can (or can't) alice submit on farm?" from what Slurm holds.

Three views side by side: what the store wants (eligibility, the groups and accounts
that give reach, the associations the sync would create), what slurmdbd holds (sacctmgr),
and what slurmctld holds (``scontrol show assoc_mgr``, when the controller is reachable
from here). The verdict comes from the most authoritative view available, slurmctld
first: the wanted state only says what the *next sync* will make true, and a user the
store no longer wants keeps running jobs until then. Asked for a name the user had
before a rename, the answer names the user's current name.
"""

from __future__ import annotations

from typing import Any

from ...adapters.sacctmgr import SAcctMgr
from ...adapters.scontrol import CtldUser, SControl, parse_assoc_mgr
from ...errors import CheetoError, NotFound
from ...models.fields import utcnow
from ...queries.group import user_groups_at_site
from ...queries.site import get_site
from ...queries.slurm import user_slurm_at_site
from ...queries.sync_runs import last_sync_run, live_items
from ...queries.user import find_site_info, get_user
from .actual import read_user_state
from .desired import eligibility, user_renames
from .limits import describe
from .quota import QuotaBlocks, quota_blocks
from .state import TRES, AssocKey, AssocState

# a limit of 0 on any of these refuses or holds every job of the association
_BLOCKING = frozenset({"MaxJobs", "MaxSubmitJobs", "GrpJobs", "GrpSubmitJobs"})


def _blocking(state: AssocState) -> list[str]:
    """Limits that refuse or hold every job; ``GrpTRESMins=cpu=0`` is a quota block
    (sync/slurm/quota.py), so it counts (a ``gres/gpu=0`` one holds GPU jobs only)."""
    found = [f"{k}={v}" for k, v in state.extra if k in _BLOCKING and v == "0"]
    found += [f"{k}={v} (out of quota)" for k, v in state.extra
              if k == "GrpTRESMins" and "cpu=0" in v.split(",")]
    return found


async def _resolve(user_name: str) -> tuple[str, str | None]:
    """(current name, the old name asked for or None)."""
    try:
        return (await get_user(user_name)).name, None
    except NotFound:
        renamed = (await user_renames()).get(user_name)
        if renamed is None:
            raise
        return renamed, user_name


async def explain(site_name: str, user_name: str, *, runner: SAcctMgr | None,
                  scontrol: SControl | None = None) -> dict[str, Any]:
    site = await get_site(site_name)
    current, asked = await _resolve(user_name)
    user = await get_user(current)
    usi = await find_site_info(user.name, site.name)
    verdict = eligibility(user, usi, utcnow())

    reach = await user_slurm_at_site(user.name, site.name) if usi else []
    expected: dict[AssocKey, dict[str, Any]] = {}
    if verdict.eligible:
        for row in reach:
            for assoc in row.associations:
                key = AssocKey(user.name, assoc.account, assoc.partition)
                expected[key] = {"account": assoc.account, "partition": assoc.partition,
                                 "qos": sorted(assoc.qos), "default_qos": assoc.default_qos,
                                 "via": list(row.roles)}
    expected_accounts = {k.account for k in expected}
    blocks = await _quota_blocks(site.name, user.name, expected_accounts)
    default = site.slurm.default_account
    expected_default = (default if default in expected_accounts
                        else min(expected_accounts) if expected_accounts else None)

    data: dict[str, Any] = {"user": user.name, "site": site.name,
                            "cluster": site.cluster_name}
    if asked is not None:
        data["renamed"] = {"asked_for": asked, "now": user.name}
    data |= {
        "eligibility": {"on_site": verdict.on_site, "status": verdict.status,
                        "access": list(verdict.access), "expired": verdict.expired,
                        "eligible": verdict.eligible, "blocked_by": verdict.reasons()},
        "groups": [{"group": r.group.name, "roles": list(r.roles)}
                   for r in await user_groups_at_site(user.name, site.name)],
        "accounts": [r.as_dict() for r in reach],
        "wanted": {"can_submit": verdict.eligible and _usable_wanted(expected, user.name,
                                                                     blocks),
                   "associations": [expected[k] for k in sorted(expected)],
                   "default_account": expected_default,
                   "quota_blocks": _block_lines(blocks)},
    }
    data["slurmdbd"] = await _slurmdbd(runner, site.cluster_name, user.name, set(expected))
    data["slurmctld"] = await _slurmctld(scontrol, site.cluster_name, user.name)
    data["last_sync"] = await _last_sync(site.name, user.name)
    can_submit, source = _verdict(data)
    data["can_submit"], data["verdict_from"] = can_submit, source
    data["summary"] = _summary(data, can_submit, source)
    return data


async def _quota_blocks(site: str, user: str, accounts: set[str]) -> QuotaBlocks:
    """The quota blocks the next sync writes for ``user`` and ``accounts`` (a user out of
    CPU minutes is blocked on every association; an account's block holds its members)."""
    found = await quota_blocks(site, utcnow(), users=[user], accounts=sorted(accounts))
    return QuotaBlocks(users={k: v for k, v in found.users.items() if k == user},
                       accounts={k: v for k, v in found.accounts.items() if k in accounts},
                       notes={k: v for k, v in found.notes.items()
                              if k == ("user", user) or (k[0] == "account" and k[1] in accounts)})


def _cpu_blocked(block: TRES | None) -> bool:
    """``cpu=0`` holds every job (a ``gres/gpu=0`` block holds GPU jobs only)."""
    return block is not None and ("cpu", 0) in block


def _usable_wanted(expected: dict[AssocKey, dict[str, Any]], user: str,
                   blocks: QuotaBlocks) -> bool:
    """Some wanted association would take a job: neither the user nor its account is
    out of CPU quota (the same judgement as slurmdbd's ``GrpTRESMins=cpu=0``)."""
    if _cpu_blocked(blocks.users.get(user)):
        return False
    return any(not _cpu_blocked(blocks.accounts.get(k.account)) for k in expected)


def _block_lines(blocks: QuotaBlocks) -> list[str]:
    return [blocks.notes[k] for k in sorted(blocks.notes)]


async def _slurmdbd(runner: SAcctMgr | None, cluster: str, user: str,
                    expected: set[AssocKey]) -> dict[str, Any]:
    if runner is None:
        return {"checked": False}
    try:
        live, live_default = await read_user_state(runner, cluster, user)
    except CheetoError as exc:
        return {"checked": False, "error": exc.message}
    usable = [k for k, v in live.items() if not _blocking(v)]
    return {
        "checked": True, "can_submit": bool(usable), "default_account": live_default,
        "associations": [{"account": k.account, "partition": k.partition,
                          "qos": sorted(v.qos), "default_qos": v.default_qos,
                          "limits": describe(v.extra), "blocking_limits": _blocking(v)}
                         for k, v in sorted(live.items())],
        "missing": [str(k) for k in sorted(expected - set(live))],
        "unexpected": [str(k) for k in sorted(set(live) - expected)],
    }


async def _slurmctld(scontrol: SControl | None, cluster: str, user: str) -> dict[str, Any]:
    if scontrol is None:
        return {"checked": False}
    try:
        if not await scontrol.reachable():
            return {"checked": False, "error": "slurmctld is not reachable from here"}
        result = await scontrol.assoc_mgr(user)
    except CheetoError as exc:
        return {"checked": False, "error": exc.message}
    if not result.ok:
        return {"checked": False, "error": f"scontrol: {result.summary()}"}
    held: CtldUser = parse_assoc_mgr(result.stdout, user, cluster)
    usable = [a for a in held.associations if not a.blocking]
    return {"checked": True, "can_submit": bool(usable) and held.default_account is not None,
            "default_account": held.default_account,
            "associations": [a.as_dict() for a in held.associations]}


def _verdict(data: dict[str, Any]) -> tuple[bool, str]:
    """From slurmctld if it answered, else slurmdbd, else the wanted state."""
    for source in ("slurmctld", "slurmdbd"):
        if data[source].get("checked"):
            return bool(data[source]["can_submit"]), source
    return bool(data["wanted"]["can_submit"]), "wanted"


async def _last_sync(site: str, user: str) -> dict[str, Any] | None:
    """The last sync run (applied or dry: ``apply`` says), the same one ``cheeto daemon
    status`` shows (``queries.sync_runs.last_sync_run``)."""
    run = await last_sync_run("slurm", site)
    if run is None:
        return None
    mine = [i for i in await live_items(run)
            if any(t.split("@")[0] == user or t.startswith(f"default {user}=")
                   or t.endswith((f":{user}", f"={user}")) for t in i.targets)]
    return {"run": run.id, "started_at": run.started_at, "apply": run.apply,
            "status": run.status, "error": run.error,
            "commands_for_user": [{"batch": i.batch, "outcome": i.outcome,
                                   "command": i.command, "detail": i.detail} for i in mine]}


def _summary(data: dict[str, Any], can_submit: bool, source: str) -> str:
    wanted = data["wanted"]["can_submit"]
    if can_submit:
        text = (f"can submit ({source} holds an association)" if source != "wanted"
                else "can submit by the store's rules (Slurm was not asked)")
        if not wanted and data["eligibility"]["eligible"] and data["wanted"]["quota_blocks"]:
            text += ("; but out of quota (" + "; ".join(data["wanted"]["quota_blocks"])
                     + "): the next sync blocks it")
        elif not wanted:
            reasons = data["eligibility"]["blocked_by"] or ["no group gives them reach"]
            text += ("; the store no longer wants this (" + ", ".join(reasons)
                     + "): the next sync removes it")
        return text
    held = data.get(source, {}).get("associations") or []
    if any(a.get("blocking_limits") for a in held):
        limits = sorted({x for a in held for x in a["blocking_limits"]})
        return (f"cannot submit: {source} holds a limit of 0 ({', '.join(limits)})"
                + ("; the next sync clears it" if wanted else ""))
    if source == "slurmctld" and held and data["slurmctld"]["default_account"] is None:
        return "cannot submit: slurmctld holds no default account for them"
    blocked = data["eligibility"]["blocked_by"]
    if blocked:
        return "cannot submit: " + ", ".join(blocked)
    if data["wanted"]["associations"] and data["wanted"]["quota_blocks"]:
        return "cannot submit: out of quota (" + "; ".join(data["wanted"]["quota_blocks"]) + ")"

    if not data["wanted"]["associations"]:
        return "cannot submit: no group with a Slurm association gives them reach"
    if source == "wanted":
        return "cannot submit: the store wants it but Slurm was not asked (--offline)"
    return f"cannot submit: {source} does not have the expected associations yet (run a sync)"

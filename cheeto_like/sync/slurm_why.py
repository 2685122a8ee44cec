"""Answer "why can't alice submit on farm?" from the same rules the sync uses.

The answer puts side by side: the user's eligibility (site, status, access, expiry),
the groups and accounts that give them Slurm reach, the associations the sync wants
for them, what slurmdbd holds for them now, and what the last applied sync did.
"""

from __future__ import annotations

from typing import Any

from ..adapters.sacctmgr import SAcctMgr
from ..errors import CheetoError
from ..models import SyncRun
from ..models.fields import utcnow
from ..queries.group import user_groups_at_site
from ..queries.site import get_site
from ..queries.slurm import user_slurm_at_site
from ..queries.user import find_site_info, get_user
from .slurm_actual import read_user_state
from .slurm_desired import eligibility
from .slurm_state import AssocKey


async def explain(site_name: str, user_name: str, *,
                  runner: SAcctMgr | None) -> dict[str, Any]:
    site = await get_site(site_name)
    user = await get_user(user_name)
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
    default = site.slurm.default_account
    expected_default = (default if default in expected_accounts
                        else min(expected_accounts) if expected_accounts else None)

    data: dict[str, Any] = {
        "user": user.name, "site": site.name, "cluster": site.cluster_name,
        "eligibility": {"on_site": verdict.on_site, "status": verdict.status,
                        "access": list(verdict.access), "expired": verdict.expired,
                        "eligible": verdict.eligible, "blocked_by": verdict.reasons()},
        "groups": [{"group": r.group.name, "roles": list(r.roles)}
                   for r in await user_groups_at_site(user.name, site.name)],
        "accounts": [r.as_dict() for r in reach],
        "expected_associations": [expected[k] for k in sorted(expected)],
        "expected_default_account": expected_default,
    }

    live_keys: set[AssocKey] | None = None
    if runner is None:
        data["slurmdbd"] = {"checked": False}
    else:
        try:
            live, live_default = await read_user_state(runner, site.cluster_name, user.name)
        except CheetoError as exc:
            data["slurmdbd"] = {"checked": False, "error": exc.message}
        else:
            live_keys = set(live)
            data["slurmdbd"] = {
                "checked": True, "default_account": live_default,
                "associations": [{"account": k.account, "partition": k.partition,
                                  "qos": sorted(v.qos), "default_qos": v.default_qos}
                                 for k, v in sorted(live.items())],
                "missing": [str(k) for k in sorted(set(expected) - live_keys)],
                "unexpected": [str(k) for k in sorted(live_keys - set(expected))],
            }

    last = await SyncRun.find({"target": "slurm", "site": site.name, "apply": True}).sort(
        -SyncRun.started_at).limit(1).to_list()
    if last:
        run = last[0]
        mine = [i for i in run.items
                if any(t.split("@")[0] == user.name or t.startswith(f"default {user.name}=")
                       or t.endswith(f":{user.name}") for t in i.targets)]
        data["last_sync"] = {"run": run.id, "started_at": run.started_at,
                             "status": run.status, "error": run.error,
                             "commands_for_user": [{"batch": i.batch, "outcome": i.outcome,
                                                    "command": i.command, "detail": i.detail}
                                                   for i in mine]}
    else:
        data["last_sync"] = None

    can_submit = verdict.eligible and bool(expected)
    if live_keys is not None:
        can_submit = can_submit and bool(live_keys & set(expected))
    data["can_submit"] = can_submit
    data["summary"] = _summary(data, can_submit)
    return data


def _summary(data: dict[str, Any], can_submit: bool) -> str:
    if can_submit:
        return "can submit"
    blocked = data["eligibility"]["blocked_by"]
    if blocked:
        return "cannot submit: " + ", ".join(blocked)
    if not data["expected_associations"]:
        return "cannot submit: no group with a Slurm association gives them reach"
    return "cannot submit: slurmdbd does not have the expected associations yet (run a sync)"

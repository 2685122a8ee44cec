"""Every limit column on rows cheeto owns, and how to clear one.

The store manages only a few limits (account MaxJobs/GrpJobs/MaxSubmit/MaxWall; QOS
GrpTRES/MaxTRESPerUser/MaxTRESPerJob/Priority/Flags). Any other limit on an owned row
was set by hand, and it blocks jobs just as well (``MaxJobs=0`` on a user association,
``MaxWall=1 GrpJobs=1`` on a QOS), so the sync reads every limit column and clears the
ones the store does not want: for the store "unset" means "no limit".

Columns were checked against sacctmgr 22.05 (docs/sacctmgr-notes.md §10): the name to
read (``format=``) differs from the name to write (``set``) for several of them, and a
TRES limit is cleared key by key (``GrpTRESMins=cpu=-1``; a bare ``-1`` is refused).
"""

from __future__ import annotations

from collections.abc import Sequence

# (format= column, set name, is TRES). Association rows, read with WOPLimits so that
# user rows show their own values and not what they inherit from the account.
ASSOC_LIMITS: tuple[tuple[str, str, bool], ...] = (
    ("grptres", "GrpTRES", True),
    ("grptresmins", "GrpTRESMins", True),
    ("grptresrunmins", "GrpTRESRunMins", True),
    ("grpjobs", "GrpJobs", False),
    ("grpjobsaccrue", "GrpJobsAccrue", False),
    ("grpsubmit", "GrpSubmitJobs", False),
    ("grpwall", "GrpWall", False),
    ("maxtres", "MaxTRES", True),
    ("maxtrespernode", "MaxTRESPerNode", True),
    ("maxtresmins", "MaxTRESMins", True),
    ("maxjobs", "MaxJobs", False),
    ("maxjobsaccrue", "MaxJobsAccrue", False),
    ("maxsubmit", "MaxSubmitJobs", False),
    ("maxwall", "MaxWall", False),
    ("minpriothresh", "MinPrioThresh", False),
)
# account rows: limits the store manages itself (compared by AccountState.limits)
ACCOUNT_MANAGED = frozenset({"GrpJobs", "MaxJobs", "MaxSubmitJobs", "MaxWall"})
# on account and user rows alike: quota blocks (``grp_tres_mins``, sync/slurm/quota.py)
TRES_MINS = "GrpTRESMins"

# QOS columns other than the ones the store manages (grptres, maxtrespu, maxtres,
# priority, flags). The per-user/per-account columns have long set names.
QOS_LIMITS: tuple[tuple[str, str, bool], ...] = (
    ("grptresmins", "GrpTRESMins", True),
    ("grptresrunmins", "GrpTRESRunMins", True),
    ("grpjobs", "GrpJobs", False),
    ("grpjobsaccrue", "GrpJobsAccrue", False),
    ("grpsubmit", "GrpSubmitJobs", False),
    ("grpwall", "GrpWall", False),
    ("maxtrespernode", "MaxTRESPerNode", True),
    ("maxtresmins", "MaxTRESMins", True),
    ("maxjobspu", "MaxJobsPerUser", False),
    ("maxsubmitpu", "MaxSubmitJobsPerUser", False),
    ("maxjobsaccruepu", "MaxJobsAccruePerUser", False),
    ("maxtrespa", "MaxTRESPerAccount", True),
    ("maxjobspa", "MaxJobsPerAccount", False),
    ("maxsubmitpa", "MaxSubmitJobsPerAccount", False),
    ("maxjobsaccruepa", "MaxJobsAccruePerAccount", False),
    ("maxwall", "MaxWall", False),
    ("mintres", "MinTRESPerJob", True),
)

ASSOC_LIMIT_FORMAT = ",".join(c for c, _, _ in ASSOC_LIMITS)
QOS_LIMIT_FORMAT = ",".join(c for c, _, _ in QOS_LIMITS)

# (set name, value as shown) for each limit that is set; sorted, empty = no limits
Limits = tuple[tuple[str, str], ...]


def parse_limits(cells: Sequence[str], table: Sequence[tuple[str, str, bool]], *,
                 skip: frozenset[str] = frozenset()) -> Limits:
    """The set limits among ``cells`` (one per column of ``table``), minus ``skip``."""
    found = []
    for (_, set_name, _), cell in zip(table, cells, strict=False):
        if cell.strip() and set_name not in skip:
            found.append((set_name, cell.strip()))
    return tuple(sorted(found))


def reset_args(limits: Limits, table: Sequence[tuple[str, str, bool]]) -> tuple[str, ...]:
    """``set`` arguments that clear every limit in ``limits``: ``X=-1``, or for a TRES
    limit ``X=k1=-1,k2=-1`` (each key that is set)."""
    tres_cols = {set_name for _, set_name, is_tres in table if is_tres}
    args = []
    for set_name, value in limits:
        if set_name in tres_cols:
            keys = [item.partition("=")[0] for item in value.split(",") if item]
            args.append(f"{set_name}={','.join(f'{k}=-1' for k in keys)}")
        else:
            args.append(f"{set_name}=-1")
    return tuple(args)


def describe(limits: Limits) -> str:
    """``MaxJobs=0 GrpWall=00:01:00`` for notes and ``why``."""
    return " ".join(f"{k}={v}" for k, v in limits)


def tres_mins_args(want: Sequence[tuple[str, int]],
                   have: Sequence[tuple[str, int]]) -> tuple[str, ...]:
    """``set`` argument that turns GrpTRESMins ``have`` into ``want`` (TRES pairs): the
    keys that differ get their value, the keys only ``have`` has get ``-1``; nothing when
    they are equal (one argument: ``GrpTRESMins=cpu=0,gres/gpu=-1``)."""
    wanted, current = dict(want), dict(have)
    items = [f"{k}={v}" for k, v in sorted(wanted.items()) if current.get(k) != v]
    items += [f"{k}=-1" for k in sorted(current) if k not in wanted]
    return (f"{TRES_MINS}={','.join(items)}",) if items else ()

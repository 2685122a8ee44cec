"""Actual Slurm state of one cluster, read with explicit columns and parsed by position.

Every read is ``sacctmgr -i -P -n show … format=…`` and scoped to the cluster where
Slurm scopes the entity (associations, default accounts); QOS and coordinators are
global in slurmdbd, so QOS carry an ownership tag (``Description=cheeto:<cluster>``) and
only our accounts' coordinators are compared. The formats and output shapes are pinned
in docs/sacctmgr-notes.md and tests/adapters/test_sacctmgr_*.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from ...adapters.sacctmgr import SAcctMgr
from ...errors import ExternalError
from ...models.slurm import walltime_minutes
from .limits import (
    ACCOUNT_MANAGED,
    ASSOC_LIMIT_FORMAT,
    ASSOC_LIMITS,
    QOS_LIMIT_FORMAT,
    QOS_LIMITS,
    TRES_MINS,
    Limits,
    parse_limits,
)
from .state import (
    OWNER_PREFIX,
    TRES,
    AccountState,
    AssocKey,
    AssocState,
    QOSState,
    SlurmState,
    parse_tres,
)

ASSOC_COLUMNS = "account,user,partition,qos,defaultqos,maxjobs,grpjobs,maxsubmit,maxwall"
QOS_COLUMNS = "name,description,priority,flags,grptres,maxtrespu,maxtres"
ROOT_USERS = frozenset({"root"})

# what -> the sacctmgr show arguments for a cluster (printed in --help for dump files)
READS: dict[str, Callable[[str], list[str]]] = {
    "qos": lambda cluster: ["show", "qos", f"format={QOS_COLUMNS},{QOS_LIMIT_FORMAT}"],
    "assoc": lambda cluster: ["show", "assoc", "where", f"cluster={cluster}",
                              f"format={ASSOC_COLUMNS}"],
    # every limit column, each row's own values (user rows otherwise show inherited ones)
    "limits": lambda cluster: ["show", "assoc", "where", f"cluster={cluster}", "WOPLimits",
                               f"format=account,user,partition,{ASSOC_LIMIT_FORMAT}"],
    "user": lambda cluster: ["show", "user", "where", f"cluster={cluster}",
                             "format=user,defaultaccount"],
    "defaults": lambda cluster: ["show", "assoc", "where", f"cluster={cluster}", "onlydefaults",
                                 "format=user,account,partition"],
    "coordinator": lambda cluster: ["show", "account", "withcoord",
                                    "format=account,coordinators"],
    "usage": lambda cluster: ["show", "assoc", "format=cluster,qos,defaultqos"],
}


class StateReader(Protocol):
    async def read(self, what: str, cluster: str) -> str: ...


class SAcctMgrReader:
    """Reads the live slurmdbd; refuses a cluster slurmdbd does not know (an unknown
    cluster reads as empty, which must never pass for "nothing is there")."""

    def __init__(self, runner: SAcctMgr) -> None:
        self.runner = runner
        self._checked: set[str] = set()

    async def read(self, what: str, cluster: str) -> str:
        if cluster not in self._checked:
            known = await self.runner.read(["show", "cluster", "where", f"name={cluster}",
                                            "format=cluster"])
            if cluster not in known.split():
                raise ExternalError(f"slurmdbd does not know cluster {cluster!r} (register it "
                                    f"with `sacctmgr add cluster {cluster}`, or set the site's "
                                    "cluster with `ng site slurm set-cluster`)")
            self._checked.add(cluster)
        return await self.runner.read(READS[what](cluster))


class DumpReader:
    """Offline preview: the same text, from files made with the READS commands."""

    def __init__(self, texts: Mapping[str, str]) -> None:
        self.texts = dict(texts)

    async def read(self, what: str, cluster: str) -> str:
        return self.texts.get(what, "")


def _rows(text: str, width: int, minimum: int | None = None) -> list[list[str]]:
    """Rows of ``width`` cells; with ``minimum``, shorter rows (dumps made before more
    columns were read) are padded with blanks."""
    rows = []
    least = width if minimum is None else minimum
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = line.split("|")
        if len(cells) < least:
            raise ExternalError(f"unexpected sacctmgr output line {line!r} "
                                f"(expected {width} columns)")
        rows.append((cells + [""] * width)[:width])
    return rows


def _int_or_none(cell: str) -> int | None:
    return int(cell) if cell.strip() else None


def parse_qos(text: str) -> dict[str, QOSState]:
    found = {}
    for row in _rows(text, 7 + len(QOS_LIMITS), minimum=7):
        name, description, priority, flags, grp, user, job = row[:7]
        if name == "normal":
            continue
        owner = description[len(OWNER_PREFIX):] if description.startswith(OWNER_PREFIX) else None
        found[name] = QOSState(name, parse_tres(grp), parse_tres(user), parse_tres(job),
                               int(priority or 0),
                               frozenset(f for f in flags.split(",") if f), owner,
                               parse_limits(row[7:], QOS_LIMITS))
    return found


def parse_associations(text: str, root_users: frozenset[str] = ROOT_USERS) -> tuple[
        dict[str, AccountState], dict[AssocKey, AssocState]]:
    """Account rows are the rows without a user (never "rows without a partition": a
    user association may have no partition). User rows show inherited limits, so limits
    come from account rows only (the ``limits`` read has each row's own).

    Only root's own rows are skipped: the ``root`` account row and the associations of
    ``root_users`` under it. Anyone else under ``root`` (``sacctmgr add user dave
    account=root``) can run jobs, so they are drift like any unwanted association."""
    accounts: dict[str, AccountState] = {}
    associations: dict[AssocKey, AssocState] = {}
    shared: dict[AssocState, AssocState] = {}  # 60k rows share a few hundred states
    for (account, user, partition, qos, default_qos, max_jobs, grp_jobs, max_submit,
         max_wall) in _rows(text, 9):
        if account == "root" and (not user or user in root_users):
            continue
        if not user:
            accounts[account] = AccountState(account, _int_or_none(max_jobs),
                                             _int_or_none(grp_jobs), _int_or_none(max_submit),
                                             walltime_minutes(max_wall))
        else:
            state = AssocState(frozenset(q for q in qos.split(",") if q), default_qos or None)
            associations[AssocKey(user, account, partition)] = shared.setdefault(state, state)
    return accounts, associations


def parse_default_accounts(text: str,
                           root_users: frozenset[str] = ROOT_USERS) -> dict[str, str]:
    return {user: account for user, account in _rows(text, 2)
            if user and account and not (account == "root" and user in root_users)}


def parse_default_rows(text: str,
                       root_users: frozenset[str] = ROOT_USERS) -> frozenset[AssocKey]:
    return frozenset(AssocKey(user, account, partition)
                     for user, account, partition in _rows(text, 3)
                     if user and not (account == "root" and user in root_users))


def parse_limit_rows(text: str) -> dict[tuple[str, str, str], Limits]:
    """(account, user, partition) -> the limits set on that row itself (WOPLimits read);
    an account row has user ``""``. Rows without any limit are left out."""
    found = {}
    for row in _rows(text, 3 + len(ASSOC_LIMITS)):
        limits = parse_limits(row[3:], ASSOC_LIMITS)
        if limits:
            found[(row[0], row[1], row[2])] = limits
    return found


def with_limits(accounts: dict[str, AccountState], associations: dict[AssocKey, AssocState],
                limits: dict[tuple[str, str, str], Limits]) -> None:
    """Attach the limits the store does not manage to the rows cheeto owns (in place).
    GrpTRESMins is the store's too (quota blocks, sync/slurm/quota.py): it goes in
    ``grp_tres_mins``, parsed, so the plan compares it with the wanted value."""
    for name, state in accounts.items():
        own = limits.get((name, "", ""), ())
        extra = tuple(x for x in own if x[0] not in ACCOUNT_MANAGED)
        if extra:
            extra, tres_mins = _split_tres_mins(extra)
            accounts[name] = replace(state, extra=extra, grp_tres_mins=tres_mins)
    for key, assoc in associations.items():
        if extra := limits.get((key.account, key.user, key.partition), ()):
            extra, tres_mins = _split_tres_mins(extra)
            associations[key] = assoc._replace(extra=extra, grp_tres_mins=tres_mins)


def _split_tres_mins(limits: Limits) -> tuple[Limits, TRES]:
    """(the other limits, GrpTRESMins parsed)."""
    value = dict(limits).get(TRES_MINS)
    if value is None:
        return limits, ()
    return tuple(x for x in limits if x[0] != TRES_MINS), parse_tres(value)


@dataclass(frozen=True)
class Policy:
    """What on the cluster cheeto leaves alone (config ``slurm.root_users`` and
    ``slurm.unmanaged_accounts``): root's associations of these users, and these
    accounts with everything under them. Every other account is cheeto's."""

    root_users: frozenset[str] = ROOT_USERS
    unmanaged_accounts: frozenset[str] = frozenset()

    @classmethod
    def of(cls, root_users: Iterable[str], unmanaged_accounts: Iterable[str]) -> Policy:
        """From config lists; names are lowercased as slurmdbd stores them."""
        return cls(frozenset(u.lower() for u in root_users),
                   frozenset(a.lower() for a in unmanaged_accounts))


def parse_coordinators(text: str, accounts: set[str]) -> dict[str, frozenset[str]]:
    return {account: frozenset(c for c in names.split(",") if c)
            for account, names in _rows(text, 2) if account in accounts}


def parse_foreign_qos(text: str, cluster: str) -> frozenset[str]:
    used: set[str] = set()
    for row_cluster, qos, default_qos in _rows(text, 3):
        if row_cluster != cluster:
            used.update(q for q in qos.split(",") if q)
            if default_qos:
                used.add(default_qos)
    return frozenset(used)


async def actual_state(reader: StateReader, cluster: str,
                       policy: Policy | None = None) -> SlurmState:
    """The cluster's state without the two reads only deletions need (see
    ``with_deletion_facts``): on a large slurmdbd each costs as much as all the others."""
    policy = policy or Policy()
    qos = parse_qos(await reader.read("qos", cluster))
    accounts, associations = parse_associations(await reader.read("assoc", cluster),
                                                policy.root_users)
    if policy.unmanaged_accounts:
        accounts = {n: a for n, a in accounts.items() if n not in policy.unmanaged_accounts}
        associations = {k: v for k, v in associations.items()
                        if k.account not in policy.unmanaged_accounts}
    with_limits(accounts, associations, parse_limit_rows(await reader.read("limits", cluster)))
    defaults = parse_default_accounts(await reader.read("user", cluster), policy.root_users)
    coordinators = parse_coordinators(await reader.read("coordinator", cluster), set(accounts))
    return SlurmState(cluster=cluster, qos=qos, accounts=accounts, associations=associations,
                      default_accounts=defaults, coordinators=coordinators)


async def with_deletion_facts(reader: StateReader, actual: SlurmState) -> SlurmState:
    """Add which association rows are default rows (deletes are split by it) and which
    QOS other clusters use (never removed from here)."""
    cluster = actual.cluster
    default_text = await reader.read("defaults", cluster)
    if default_text.strip():
        default_rows = parse_default_rows(default_text, frozenset())
    else:  # offline without that dump: the rows on each user's default account
        default_rows = frozenset(k for k in actual.associations
                                 if actual.default_accounts.get(k.user) == k.account)
    foreign = parse_foreign_qos(await reader.read("usage", cluster), cluster)
    return replace(actual, default_rows=default_rows, foreign_qos=foreign)


async def read_user_state(runner: SAcctMgr, cluster: str,
                          user: str) -> tuple[dict[AssocKey, AssocState], str | None]:
    """One user's associations (with the limits set on their own rows and on their
    accounts' rows) and default account on ``cluster``, as slurmdbd holds them (for
    ``slurm why``). Reads the whole cluster: sacctmgr has no cheaper exact filter that
    also covers rows under ``root``."""
    reader = SAcctMgrReader(runner)
    _, associations = parse_associations(await reader.read("assoc", cluster),
                                         frozenset())
    mine = {k: v for k, v in associations.items() if k.user == user}
    limits = parse_limit_rows(await reader.read("limits", cluster))
    for key, state in mine.items():
        own = limits.get((key.account, key.user, key.partition), ())
        parent = limits.get((key.account, "", ""), ())
        mine[key] = state._replace(extra=tuple(sorted({*own, *parent})))
    defaults = parse_default_accounts(await reader.read("user", cluster), frozenset())
    return mine, defaults.get(user)

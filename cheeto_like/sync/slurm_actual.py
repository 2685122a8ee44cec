"""Actual Slurm state of one cluster, read with explicit columns and parsed by position.

Every read is ``sacctmgr -i -P -n show … format=…`` and scoped to the cluster where
Slurm scopes the entity (associations, default accounts); QOS and coordinators are
global in slurmdbd, so QOS carry an ownership tag (``Description=cheeto:<cluster>``) and
only our accounts' coordinators are compared. The formats and output shapes are pinned
in docs/sacctmgr-notes.md and tests/adapters/test_sacctmgr_conformance.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Protocol

from ..adapters.sacctmgr import SAcctMgr
from ..errors import ExternalError
from ..models.slurm import walltime_minutes
from .slurm_state import (
    OWNER_PREFIX,
    AccountState,
    AssocKey,
    AssocState,
    QOSState,
    SlurmState,
    parse_tres,
)

ASSOC_COLUMNS = "account,user,partition,qos,defaultqos,maxjobs,grpjobs,maxsubmit,maxwall"

# what -> the sacctmgr show arguments for a cluster (printed in --help for dump files)
READS: dict[str, Callable[[str], list[str]]] = {
    "qos": lambda cluster: ["show", "qos",
                            "format=name,description,priority,flags,grptres,maxtrespu,maxtres"],
    "assoc": lambda cluster: ["show", "assoc", "where", f"cluster={cluster}",
                              f"format={ASSOC_COLUMNS}"],
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


def _rows(text: str, width: int) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = line.split("|")
        if len(cells) < width:
            raise ExternalError(f"unexpected sacctmgr output line {line!r} "
                                f"(expected {width} columns)")
        rows.append(cells[:width])
    return rows


def _int_or_none(cell: str) -> int | None:
    return int(cell) if cell.strip() else None


def parse_qos(text: str) -> dict[str, QOSState]:
    found = {}
    for name, description, priority, flags, grp, user, job in _rows(text, 7):
        if name == "normal":
            continue
        owner = description[len(OWNER_PREFIX):] if description.startswith(OWNER_PREFIX) else None
        found[name] = QOSState(name, parse_tres(grp), parse_tres(user), parse_tres(job),
                               int(priority or 0),
                               frozenset(f for f in flags.split(",") if f), owner)
    return found


def parse_associations(text: str) -> tuple[dict[str, AccountState],
                                           dict[AssocKey, AssocState]]:
    """Account rows are the rows without a user (never "rows without a partition": a
    user association may have no partition). User rows show inherited limits, so limits
    come from account rows only."""
    accounts: dict[str, AccountState] = {}
    associations: dict[AssocKey, AssocState] = {}
    for (account, user, partition, qos, default_qos, max_jobs, grp_jobs, max_submit,
         max_wall) in _rows(text, 9):
        if account == "root":
            continue
        if not user:
            accounts[account] = AccountState(account, _int_or_none(max_jobs),
                                             _int_or_none(grp_jobs), _int_or_none(max_submit),
                                             walltime_minutes(max_wall))
        else:
            associations[AssocKey(user, account, partition)] = AssocState(
                frozenset(q for q in qos.split(",") if q), default_qos or None)
    return accounts, associations


def parse_default_accounts(text: str) -> dict[str, str]:
    return {user: account for user, account in _rows(text, 2)
            if user and account and user != "root"}


def parse_default_rows(text: str) -> frozenset[AssocKey]:
    return frozenset(AssocKey(user, account, partition)
                     for user, account, partition in _rows(text, 3)
                     if user and account != "root")


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


async def actual_state(reader: StateReader, cluster: str) -> SlurmState:
    """The cluster's state without the two reads only deletions need (see
    ``with_deletion_facts``): on a large slurmdbd each costs as much as all the others."""
    qos = parse_qos(await reader.read("qos", cluster))
    accounts, associations = parse_associations(await reader.read("assoc", cluster))
    defaults = parse_default_accounts(await reader.read("user", cluster))
    coordinators = parse_coordinators(await reader.read("coordinator", cluster), set(accounts))
    return SlurmState(cluster=cluster, qos=qos, accounts=accounts, associations=associations,
                      default_accounts=defaults, coordinators=coordinators)


async def with_deletion_facts(reader: StateReader, actual: SlurmState) -> SlurmState:
    """Add which association rows are default rows (deletes are split by it) and which
    QOS other clusters use (never removed from here)."""
    cluster = actual.cluster
    default_text = await reader.read("defaults", cluster)
    if default_text.strip():
        default_rows = parse_default_rows(default_text)
    else:  # offline without that dump: the rows on each user's default account
        default_rows = frozenset(k for k in actual.associations
                                 if actual.default_accounts.get(k.user) == k.account)
    foreign = parse_foreign_qos(await reader.read("usage", cluster), cluster)
    return replace(actual, default_rows=default_rows, foreign_qos=foreign)


async def read_user_state(runner: SAcctMgr, cluster: str,
                          user: str) -> tuple[dict[AssocKey, AssocState], str | None]:
    """One user's associations and default account on ``cluster`` (for ``slurm why``)."""
    reader = SAcctMgrReader(runner)
    text = await reader.read("assoc", cluster)
    _, associations = parse_associations(text)
    mine = {k: v for k, v in associations.items() if k.user == user}
    defaults = parse_default_accounts(await reader.read("user", cluster))
    return mine, defaults.get(user)

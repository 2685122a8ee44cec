"""The Slurm accounting state of one cluster, in one normalised shape for both sides.

Desired (from the store) and actual (from sacctmgr) are parsed into these frozen
dataclasses so that equal means equal: wall time in minutes, memory in whole megabytes,
TRES as sorted (key, value) pairs with typed GRES kept as their own keys, QOS lists as
sets. Anything unlimited is absent (TRES) or None (limits).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import itemgetter
from typing import NamedTuple

from .limits import Limits

# TRES: sorted ((key, value), …); a key that is absent is unlimited.
TRES = tuple[tuple[str, int], ...]
OWNER_PREFIX = "cheeto:"  # QOS Description tag marking which cluster manages a QOS


def tres(values: Mapping[str, int]) -> TRES:
    return tuple(sorted((k, int(v)) for k, v in values.items()))


def render_tres(value: TRES) -> str:
    """``cpu=8,mem=16384,gres/gpu=2``; sacctmgr takes memory in megabytes."""
    return ",".join([f"{k}={v}" for k, v in value])


def owner_tag(cluster: str) -> str:
    return f"{OWNER_PREFIX}{cluster}"


_MEM_UNITS = "MGTPE"
_MEM_DISPLAY = re.compile(r"^(\d+(?:\.\d+)?)([MGTPE]?)$")


def render_mem(mb: int) -> str:
    """How sacctmgr (22.05) displays a memory TRES of ``mb`` megabytes: divide by 1024
    while the value is at least 1024 and a multiple of 512, then print an integer or two
    decimals. Lossy above 1 TiB (1049088 and 1048576 both show ``1.00T``/``1T``)."""
    if mb == 0:
        return "0"
    value, unit = float(mb), 0
    while value >= 1024 and int(value) % 512 == 0:
        value /= 1024
        unit += 1
    if value == int(value):
        return f"{int(value)}{_MEM_UNITS[unit]}"
    return f"{value:.2f}{_MEM_UNITS[unit]}"


def parse_mem(text: str) -> int:
    """A displayed memory value (``16G``, ``1500M``, ``1.50G``, ``0``) in whole MB."""
    match = _MEM_DISPLAY.match(text.strip())
    if match is None:
        raise ValueError(f"unexpected memory value {text!r}")
    number, unit = match.groups()
    return round(float(number) * 1024 ** (_MEM_UNITS.index(unit) if unit else 0))


def comparable_mem(mb: int) -> int:
    """``mb`` as sacctmgr will show it back, so both sides compare equal (§3.2 of
    docs/sacctmgr-notes.md); exact below 1 TiB."""
    return parse_mem(render_mem(mb))


def parse_tres(cell: str) -> TRES:
    """A GrpTRES/MaxTRESPU/MaxTRES cell: keys verbatim (typed GRES stay separate keys),
    memory in MB, empty cell = no limits."""
    values: dict[str, int] = {}
    for item in filter(None, cell.strip().split(",")):
        key, _, value = item.partition("=")
        values[key] = parse_mem(value) if key == "mem" else int(value)
    return tres(values)


@dataclass(frozen=True)
class QOSState:
    name: str
    group: TRES = ()
    user: TRES = ()
    job: TRES = ()
    priority: int = 0
    flags: frozenset[str] = frozenset()
    owner: str | None = None  # cluster named by the Description tag, if any
    extra: Limits = ()  # actual side: limits the store does not manage (to be cleared)

    def limits_equal(self, other: QOSState) -> bool:
        return (self.group, self.user, self.job, self.priority, self.flags) == (
            other.group, other.user, other.job, other.priority, other.flags)


@dataclass(frozen=True)
class AccountState:
    name: str
    max_user_jobs: int | None = None
    max_group_jobs: int | None = None
    max_submit_jobs: int | None = None
    max_wall_minutes: int | None = None
    extra: Limits = ()  # actual side: other limits set on the account row (to be cleared)
    grp_tres_mins: TRES = ()  # GrpTRESMins: a quota block (sync/slurm/quota.py)

    @property
    def limits(self) -> tuple[int | None, int | None, int | None, int | None]:
        return (self.max_user_jobs, self.max_group_jobs, self.max_submit_jobs,
                self.max_wall_minutes)


class AssocKey(NamedTuple):
    """A per-user association: (user, account, partition).

    A named tuple, not a dataclass: a site's plan hashes and compares 60k of these
    several times, and a tuple does both in C (a frozen dataclass's ``__hash__`` and
    ``__eq__`` are Python functions, about 5x slower there).
    """

    user: str
    account: str
    partition: str

    def __str__(self) -> str:
        return f"{self.user}@{self.account}/{self.partition}"


class AssocState(NamedTuple):
    """What one association carries. A named tuple like ``AssocKey`` (change one with
    ``state._replace(…)``): the plan compares a site's 60k (key, state) pairs as sets,
    which stays in C only when both halves hash and compare as tuples."""

    qos: frozenset[str]
    default_qos: str | None = None
    extra: Limits = ()  # actual side: limits set on the user row itself (to be cleared)
    grp_tres_mins: TRES = ()  # GrpTRESMins: a quota block (sync/slurm/quota.py)


@dataclass(frozen=True)
class SlurmState:
    """One cluster's accounting as far as this project manages it."""

    cluster: str
    qos: Mapping[str, QOSState] = field(default_factory=dict)
    accounts: Mapping[str, AccountState] = field(default_factory=dict)
    associations: Mapping[AssocKey, AssocState] = field(default_factory=dict)
    default_accounts: Mapping[str, str] = field(default_factory=dict)  # user -> account
    coordinators: Mapping[str, frozenset[str]] = field(default_factory=dict)  # account -> users
    # actual side only: association rows flagged as their user's default (is_def), and
    # QOS that associations of *other* clusters use (never deleted from here).
    default_rows: frozenset[AssocKey] = frozenset()
    foreign_qos: frozenset[str] = frozenset()
    notes: tuple[str, ...] = ()  # things the desired state could not include, and why
    # desired side only: old user name -> current name, for every rename in History;
    # the plan renames a user still known by an old name (``newname``) instead of
    # adding the new name and deleting the old one (docs/sacctmgr-notes.md §11)
    renames: Mapping[str, str] = field(default_factory=dict)
    # desired side: the site is quota-only (``SiteSlurmSettings.mode``): this state is the
    # actual one with only quota blocks changed, and the plan changes only those
    quota_only: bool = False
    # desired side: the (user, account) pairs its builder collected while making the
    # rows, with the very ``associations`` mapping they describe. Used only while that
    # mapping is this state's (a ``replace`` with other rows computes them afresh).
    built_pairs: tuple[Mapping[AssocKey, AssocState], frozenset[tuple[str, str]]] | None = \
        field(default=None, compare=False, repr=False)

    def user_account_pairs(self) -> frozenset[tuple[str, str]]:
        """Every (user, account) with at least one association (computed once per
        state, in C: 60k keys become 20k pairs without a Python loop).

        Why the builder's pairs: hashing 60k new (user, account) tuples is half of a
        converged plan at 20k users (~25 ms), while the builder has each account's
        roster at hand and makes the 20k pairs once per account."""
        found = self.__dict__.get("_pairs")
        if found is None:
            built = self.built_pairs
            if built is not None and built[0] is self.associations:
                found = built[1]
            else:
                keys = self.associations
                found = frozenset(zip(map(_FIRST, keys), map(_SECOND, keys), strict=True))
            self.__dict__["_pairs"] = found
        return found

    def users(self) -> frozenset[str]:
        """Every user with at least one association (computed once per state)."""
        found = self.__dict__.get("_users")
        if found is None:
            pairs = self.__dict__.get("_pairs")
            if pairs is None and self.built_pairs is not None \
                    and self.built_pairs[0] is self.associations:
                pairs = self.built_pairs[1]
            found = frozenset(map(_FIRST, pairs if pairs is not None else self.associations))
            self.__dict__["_users"] = found
        return found

    def user_accounts(self) -> dict[str, set[str]]:
        """user -> accounts they have at least one association in (computed once per
        state: the plan asks several times; treat the answer as read-only)."""
        found = self.__dict__.get("_user_accounts")
        if found is None:
            found = {}
            for user, account in self.user_account_pairs():
                accounts = found.get(user)
                if accounts is None:
                    found[user] = {account}
                else:
                    accounts.add(account)
            self.__dict__["_user_accounts"] = found
        return found


_FIRST, _SECOND = itemgetter(0), itemgetter(1)  # AssocKey -> user, account

"""The pure half of the Slurm sync: ``plan(desired, actual) -> Plan``.

No I/O. The plan is an ordered list of batches (adds, modifies, default accounts,
coordinators, then deletes) whose commands are already rendered as sacctmgr arguments.
Commands that do the same thing to several entities are merged, so one
``sacctmgr add user a,b,c account=… partition=… qos=… cluster=…`` replaces one process
per user. Why this order: everything a later step needs exists first; default accounts
move before deletes because sacctmgr refuses to delete a user's default association;
deletes go last, associations before the QOS and accounts they use.

Facts about sacctmgr this relies on are in docs/sacctmgr-notes.md (and pinned by
tests/adapters/test_sacctmgr_*.py). Two shape the deletes: slurmdbd refuses a
removal call that mixes a user's default association rows after non-default ones, so the
rows are deleted in two calls (non-default rows, then default rows, as they will be once
defaults have moved); and ``remove qos`` corrupts the QOS lists of any association still
listing it, so a QOS still used by another cluster is never removed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import compress, filterfalse, groupby
from operator import itemgetter, ne, not_
from typing import Any, Literal

from .limits import ASSOC_LIMITS, QOS_LIMITS, reset_args, tres_mins_args
from .state import (
    TRES,
    AccountState,
    AssocKey,
    AssocState,
    QOSState,
    SlurmState,
    owner_tag,
    render_tres,
)

Kind = Literal["add", "modify", "default", "coordinator", "delete"]
MAX_NAMES_PER_COMMAND = 100  # keeps command lines far below ARG_MAX and errors readable

BATCH_ORDER: tuple[tuple[str, Kind], ...] = (
    ("rename users", "modify"),
    ("add qos", "add"),
    ("modify qos", "modify"),
    ("add accounts", "add"),
    ("modify accounts", "modify"),
    ("add associations", "add"),
    ("modify associations", "modify"),
    ("set default accounts", "default"),
    ("add coordinators", "coordinator"),
    ("remove coordinators", "coordinator"),
    ("delete associations", "delete"),
    ("delete default associations", "delete"),
    ("delete qos", "delete"),
    ("delete accounts", "delete"),
)


@dataclass(frozen=True)
class Command:
    """One sacctmgr process: its arguments (without the binary and ``-i``) and the
    entities it changes (for per-item outcomes and ``why``)."""

    args: tuple[str, ...]
    targets: tuple[str, ...]

    def __str__(self) -> str:
        return " ".join(self.args)


@dataclass(frozen=True)
class Batch:
    label: str
    kind: Kind
    commands: tuple[Command, ...]

    @property
    def items(self) -> int:
        return sum(len(c.targets) for c in self.commands)


@dataclass(frozen=True)
class Plan:
    cluster: str
    batches: tuple[Batch, ...]
    conflicts: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    # (association target, QOS) for every QOS a "modify associations" command drops
    qos_removed: tuple[tuple[str, str], ...] = ()
    quota_only: bool = False  # a quota-only site: only quota blocks are changed

    @property
    def is_empty(self) -> bool:
        return not self.batches

    @property
    def processes(self) -> int:
        """How many sacctmgr processes applying this plan starts."""
        return sum(len(b.commands) for b in self.batches)

    @property
    def deletions(self) -> list[str]:
        return [t for b in self.batches if b.kind == "delete" for c in b.commands
                for t in c.targets]

    def command_removals(self, batch: Batch, command: Command) -> int:
        """How many removals one command makes: every target of a delete or coordinator
        removal, and every QOS it drops from an association."""
        if batch.kind == "delete" or batch.label == "remove coordinators":
            return len(command.targets)
        if batch.label == "modify associations":
            dropped = self._qos_removed_per_association()
            return sum(dropped.get(target, 0) for target in command.targets)
        return 0

    def _qos_removed_per_association(self) -> dict[str, int]:
        """association -> how many QOS the plan drops from it, counted once per plan
        (``command_removals`` runs per command: scanning every dropped QOS each time
        was commands x removals, quadratic in users when one QOS leaves a big group)."""
        found = self.__dict__.get("_dropped")
        if found is None:
            found = Counter(assoc for assoc, _ in self.qos_removed)
            self.__dict__["_dropped"] = found
        return found

    @property
    def removals(self) -> list[str]:
        """Everything the plan takes away, for the deletion cap and the daily budget:
        deletions, coordinator removals and QOS dropped from associations."""
        coordinators = [t for b in self.batches if b.label == "remove coordinators"
                        for c in b.commands for t in c.targets]
        dropped = [f"qos {qos} from {assoc}" for assoc, qos in self.qos_removed]
        return self.deletions + coordinators + dropped

    @property
    def counts(self) -> dict[str, int]:
        """items per batch label (entities changed, not processes)."""
        return {b.label: b.items for b in self.batches}

    def as_dict(self) -> dict[str, object]:
        return {
            "cluster": self.cluster, "quota_only": self.quota_only,
            "processes": self.processes,
            "deletions": len(self.deletions), "removals": len(self.removals),
            "counts": self.counts,
            "conflicts": list(self.conflicts), "notes": list(self.notes),
            "batches": [{"label": b.label, "kind": b.kind,
                         "commands": [{"args": list(c.args), "targets": list(c.targets)}
                                      for c in b.commands]} for b in self.batches],
        }


def _chunks(names: Sequence[str]) -> Iterable[list[str]]:
    for start in range(0, len(names), MAX_NAMES_PER_COMMAND):
        yield list(names[start:start + MAX_NAMES_PER_COMMAND])


def _grouped[T: Hashable](items: Iterable[tuple[T, str]],
                          build: Callable[[T, list[str]], Command],
                          order: Callable[[T], Any] = repr) -> list[Command]:
    """Merge entities that take the same command: {shape: [names]} -> commands."""
    by_shape: dict[T, list[str]] = {}
    for shape, name in items:
        names = by_shape.get(shape)
        if names is None:
            by_shape[shape] = [name]
        else:
            names.append(name)
    commands = []
    for shape in sorted(by_shape, key=order):
        names = by_shape[shape]
        if len(names) == 1:  # most QOS and accounts have a shape of their own
            commands.append(build(shape, names))
            continue
        names.sort()
        for chunk in _chunks(names):
            commands.append(build(shape, chunk))
    return commands


def _limit(value: int | None) -> str:
    return "-1" if value is None else str(value)


# -- QOS --------------------------------------------------------------------------------


def _qos_tres_args(want: QOSState, have: QOSState | None) -> list[str]:
    """TRES settings: desired keys, plus ``key=-1`` for keys only the actual side has
    (sacctmgr merges TRES, so a stale key must be cleared explicitly)."""
    if have is None:  # a new QOS (1,500 at a site): nothing to clear, nothing to compare
        return [f"{flag}={render_tres(tuple(sorted(wanted)))}"
                for flag, wanted in (("GrpTRES", want.group), ("MaxTRESPerUser", want.user),
                                     ("MaxTRESPerJob", want.job)) if wanted]
    args = []
    for flag, wanted, current in (("GrpTRES", want.group, have.group),
                                  ("MaxTRESPerUser", want.user, have.user),
                                  ("MaxTRESPerJob", want.job, have.job)):
        if wanted == current:
            continue
        stale = tuple((k, -1) for k, _ in current if k not in dict(wanted))
        value: TRES = tuple(sorted(wanted + stale))
        if value:
            args.append(f"{flag}={render_tres(value)}")
    return args


def _qos_shape(want: QOSState, have: QOSState | None, cluster: str) -> tuple[str, ...]:
    args = _qos_tres_args(want, have)
    if have is None or want.priority != have.priority:
        args.append(f"Priority={want.priority}")
    if have is None:
        if want.flags:
            args.append(f"Flags={','.join(sorted(want.flags))}")
    elif want.flags != have.flags:
        args.append(f"Flags={','.join(sorted(want.flags)) or '-1'}")
    if have is None or have.owner != cluster:
        args.append(f"Description={owner_tag(cluster)}")
    if have is not None:  # limits set by hand: the store wants none
        args.extend(reset_args(have.extra, QOS_LIMITS))
    return tuple(args)


def _plan_qos(desired: SlurmState, actual: SlurmState,
              conflicts: list[str]) -> tuple[list[Command], list[Command], list[Command]]:
    cluster = desired.cluster
    adds, modifies = [], []
    for name, want in sorted(desired.qos.items()):
        have = actual.qos.get(name)
        if have is not None and have.owner not in (None, cluster):
            conflicts.append(f"QOS {name!r} is managed by cluster {have.owner!r}; "
                             "not touching it")
            continue
        if have is None:
            adds.append((_qos_shape(want, None, cluster), name))
        elif not want.limits_equal(have) or have.owner != cluster or have.extra:
            modifies.append((_qos_shape(want, have, cluster), name))
    stale = []
    for name, have in sorted(actual.qos.items()):
        if have.owner != cluster or name in desired.qos:
            continue
        if name in actual.foreign_qos:
            conflicts.append(f"QOS {name!r} is no longer wanted but associations of another "
                             "cluster use it; not removing it")
            continue
        stale.append(name)
    add_cmds = _grouped(adds, lambda shape, names: Command(
        ("add", "qos", ",".join(names), *shape), tuple(f"qos {n}" for n in names)))
    mod_cmds = _grouped(modifies, lambda shape, names: Command(
        ("modify", "qos", "where", f"name={','.join(names)}", "set", *shape),
        tuple(f"qos {n}" for n in names)))
    del_cmds = [Command(("remove", "qos", "where", f"name={','.join(chunk)}"),
                        tuple(f"qos {n}" for n in chunk)) for chunk in _chunks(stale)]
    return add_cmds, mod_cmds, del_cmds


# -- accounts -----------------------------------------------------------------------------


def _account_limits(want: AccountState) -> tuple[str, ...]:
    return (f"MaxJobs={_limit(want.max_user_jobs)}", f"GrpJobs={_limit(want.max_group_jobs)}",
            f"MaxSubmit={_limit(want.max_submit_jobs)}",
            f"MaxWall={_limit(want.max_wall_minutes)}")


def _plan_accounts(desired: SlurmState,
                   actual: SlurmState) -> tuple[list[Command], list[Command], list[Command]]:
    cluster = desired.cluster
    adds, modifies = [], []
    for name, want in sorted(desired.accounts.items()):
        have = actual.accounts.get(name)
        if have is None:
            adds.append(((*_account_limits(want), *tres_mins_args(want.grp_tres_mins, ())),
                         name))
        elif (have.limits != want.limits or have.extra
              or have.grp_tres_mins != want.grp_tres_mins):  # a quota block (slurm_quota)
            modifies.append(((*_account_limits(want), *reset_args(have.extra, ASSOC_LIMITS),
                              *tres_mins_args(want.grp_tres_mins, have.grp_tres_mins)),
                             name))
    stale = sorted(set(actual.accounts) - set(desired.accounts))
    add_cmds = _grouped(adds, lambda shape, names: Command(
        ("add", "account", ",".join(names), f"cluster={cluster}", *shape),
        tuple(f"account {n}" for n in names)))
    mod_cmds = _grouped(modifies, lambda shape, names: Command(
        ("modify", "account", "where", f"name={','.join(names)}", f"cluster={cluster}",
         "set", *shape), tuple(f"account {n}" for n in names)))
    del_cmds = [Command(("remove", "account", "where", f"name={','.join(chunk)}",
                         f"cluster={cluster}"), tuple(f"account {n}" for n in chunk))
                for chunk in _chunks(stale)]
    return add_cmds, mod_cmds, del_cmds


# -- associations -------------------------------------------------------------------------


def _assoc_settings(state: AssocState) -> tuple[str, ...]:
    qos = ",".join(sorted(state.qos))
    default = state.default_qos or min(state.qos)
    return (f"qos={qos}", f"defaultqos={default}")


@dataclass(frozen=True)
class _Diff:
    """Which association rows differ, found in one pass (a site has 60k: every extra
    pass is felt in a plan that finds nothing to do)."""

    missing: list[AssocKey]  # wanted, absent from the cluster
    changed: list[AssocKey]  # on both sides, with different states
    stale: list[AssocKey]  # on the cluster, not wanted


def _diff(desired: SlurmState, actual: SlurmState) -> _Diff:
    want, have = desired.associations, actual.associations
    if want == have:  # a converged site: one comparison in C (states are tuples)
        return _Diff([], [], [])
    if not have:  # an empty cluster: everything is missing
        return _Diff(list(want), [], [])
    # the rows whose state differs (None for a missing row), split into missing and
    # changed ones, all by C iterators: no Python step per row
    differ = list(compress(want, map(ne, map(have.get, want), want.values())))
    missing = list(filterfalse(have.__contains__, differ))
    changed = list(filter(have.__contains__, differ)) if len(missing) < len(differ) else []
    # every wanted row found means the cluster has nothing else unless it is larger
    found = len(want) - len(missing)
    stale = list(filterfalse(want.__contains__, have)) if len(have) > found else []
    return _Diff(missing, changed, stale)


@dataclass(frozen=True)
class _Adds:
    commands: list[Command]
    first_account: dict[str, str]  # new user -> account of the first add that names them


_USER, _ACCOUNT, _PARTITION = itemgetter(0), itemgetter(1), itemgetter(2)
_FEW_STATES = 4  # a run with more distinct states than this is split row by row


def _add_settings(state: AssocState) -> tuple[str, ...]:
    """The settings of an ``add user`` for a row in ``state`` (with a quota block)."""
    settings = _assoc_settings(state)
    if state.grp_tres_mins:  # a quota block on a new row
        settings += tres_mins_args(state.grp_tres_mins, ())
    return settings


def _rows_by_account(desired: SlurmState, missing: list[AssocKey],
                     ) -> dict[tuple[str, tuple[str, ...]], dict[str, list[str]]]:
    """(account, settings) -> partition -> users, for the missing rows.

    Why runs and not a loop over rows: the desired builder makes its rows account by
    account and partition by partition, with one state object per (account, partition)
    unless a quota block sets some users apart. So the missing rows come in long runs,
    which ``groupby`` finds in C (its keys are the rows' own strings: nothing is
    allocated per row), and Python steps once per run (a few thousand at 60k rows).
    A run with a few states (quota blocks on some of its users) is split by a few C
    passes per state. Any order is still right, only slower."""
    rows = desired.associations
    settings_of: dict[AssocState, tuple[str, ...]] = {}
    found: dict[tuple[str, tuple[str, ...]], dict[str, list[str]]] = {}

    def add(account: str, partition: str, state: AssocState, users: list[str]) -> None:
        settings = settings_of.get(state)
        if settings is None:
            settings = settings_of[state] = _add_settings(state)
        by_partition = found.get((account, settings))
        if by_partition is None:
            by_partition = found[(account, settings)] = {}
        have = by_partition.get(partition)
        if have is None:
            by_partition[partition] = users
        else:
            have.extend(users)

    for account, in_account in groupby(missing, key=_ACCOUNT):
        for partition, run in groupby(in_account, key=_PARTITION):
            keys = list(run)
            states = list(map(rows.__getitem__, keys))
            state = states[0]
            if states.count(state) == len(states):  # one state for the whole run
                add(account, partition, state, list(map(_USER, keys)))
                continue
            users = list(map(_USER, keys))
            same = list(map(state.__eq__, states))
            rest = list(compress(states, map(not_, same)))
            if rest.count(rest[0]) == len(rest):  # two states (quota blocks on some users)
                add(account, partition, state, list(compress(users, same)))
                add(account, partition, rest[0], list(compress(users, map(not_, same))))
                continue
            for _ in range(_FEW_STATES):  # a few more: one C pass each
                same = list(map(state.__eq__, states))
                add(account, partition, state, list(compress(users, same)))
                others = list(map(not_, same))
                users, states = list(compress(users, others)), list(compress(states, others))
                if not states:
                    break
                state = states[0]
            else:  # many states: row by row
                by_state: dict[AssocState, list[str]] = {}
                for user, each in zip(users, states, strict=True):
                    by_state.setdefault(each, []).append(user)
                for each, named in by_state.items():
                    add(account, partition, each, named)
    return found


type _AddShape = tuple[str, tuple[str, ...], tuple[str, ...]]  # account, partitions, settings


def _add_shapes(desired: SlurmState, missing: list[AssocKey]) -> dict[_AddShape, list[str]]:
    """shape -> users: every user takes one ``add user`` per (account, settings) with
    the sorted list of their named partitions, and one more for a partition-less row
    (which never shares a list). Most users of an account need all of its partitions,
    which one list comparison per (account, settings) finds (the builder lists an
    account's roster in the same order for each partition); ``_partial_rosters`` sorts
    out the rest."""
    shapes: dict[_AddShape, list[str]] = {}
    for (account, settings), by_partition in _rows_by_account(desired, missing).items():
        named = sorted(p for p in by_partition if p)
        if named:
            lists = [by_partition[p] for p in named]
            if lists.count(lists[0]) == len(lists):  # the same roster in every partition
                shapes.setdefault((account, tuple(named), settings), []).extend(lists[0])
            else:
                _partial_rosters(shapes, account, named, settings, lists)
        if "" in by_partition:
            shapes.setdefault((account, ("",), settings), []).extend(by_partition[""])
    return shapes


def _partial_rosters(shapes: dict[_AddShape, list[str]], account: str, named: list[str],
                     settings: tuple[str, ...], lists: list[list[str]]) -> None:
    """The users of one (account, settings) whose partitions differ: those in every
    partition in one set intersection, only the others one at a time."""
    members = [set(users) for users in lists]
    everywhere = set.intersection(*members)
    if everywhere:
        shapes.setdefault((account, tuple(named), settings), []).extend(everywhere)
    for user in set.union(*members) - everywhere:  # users with fewer partitions
        mine = tuple(p for p, users in zip(named, members, strict=True) if user in users)
        shapes.setdefault((account, mine, settings), []).append(user)


def _plan_adds(desired: SlurmState, actual: SlurmState, missing: list[AssocKey]) -> _Adds:
    """One ``add user`` per (account, partitions, QOS settings) with every user that needs
    exactly that: sacctmgr adds the cross product of users and partitions. Commands on the
    site's default account go first, because a user's first association on a cluster
    becomes their default there, which saves a default-account change. Other shapes
    follow in the order of their ``repr`` (computed once per shape, not per user)."""
    if not missing:
        return _Adds([], {})
    cluster = desired.cluster
    shapes = _add_shapes(desired, missing)
    preferred = set(desired.default_accounts.values())
    ordered = sorted(shapes, key=lambda shape: (shape[0] not in preferred, repr(shape)))
    commands = []
    for shape in ordered:
        account, partitions, settings = shape
        head = (f"account={account}", f"partition={','.join(partitions)}",
                f"cluster={cluster}", *settings)
        suffixes = [f"@{account}/{partition}" for partition in partitions]
        for chunk in _chunks(sorted(shapes[shape])):
            commands.append(Command(
                ("add", "user", ",".join(chunk), *head),
                tuple([name + suffix for name in chunk for suffix in suffixes])))
    # a new user's first add names the account they get as default: walking the shapes
    # from last to first, the earliest shape naming a user is the one that stays
    first: dict[str, str] = {}
    for shape in reversed(ordered):
        first.update(dict.fromkeys(shapes[shape], shape[0]))
    existing = actual.users()
    for user in existing.intersection(first) if existing else ():
        del first[user]
    return _Adds(commands, first)


@dataclass(frozen=True)
class _Associations:
    modifies: list[Command]
    deletes: list[Command]  # non-default rows
    default_deletes: list[Command]  # rows flagged default once defaults have moved
    qos_removed: tuple[tuple[str, str], ...]  # (association, QOS) a modify drops


def _plan_associations(desired: SlurmState, actual: SlurmState, diff: _Diff,
                       wanted_defaults: dict[str, str]) -> _Associations:
    """Modifies and deletes of the rows ``diff`` found changed or stale."""
    cluster = desired.cluster
    modifies = []
    dropped: list[tuple[AssocKey, str]] = []
    for key in diff.changed:
        want, have = desired.associations[key], actual.associations[key]
        want_qos, have_qos = want.qos, have.qos
        qos_differs = (have_qos != want_qos
                       or (want.default_qos or min(want_qos)) != have.default_qos)
        blocks = (tres_mins_args(want.grp_tres_mins, have.grp_tres_mins)  # quota blocks
                  if want.grp_tres_mins != have.grp_tres_mins else ())  # (60k rows: cheap)
        if qos_differs or have.extra or blocks:
            settings = (*(_assoc_settings(want) if qos_differs else ()),
                        *reset_args(have.extra, ASSOC_LIMITS), *blocks)  # + hand-set ones
            modifies.append(((key.account, key.partition, settings), key.user))
            if have_qos != want_qos:
                dropped.extend((key, qos) for qos in have_qos - want_qos)
    stale_plain, stale_default = [], []
    if diff.stale:
        defaults_after = default_rows_after(desired, actual, wanted_defaults)
        for key in diff.stale:
            row = ((key.account, key.partition), key.user)
            (stale_default if key in defaults_after else stale_plain).append(row)

    def target(account: str, partition: str, names: list[str]) -> tuple[str, ...]:
        return tuple(str(AssocKey(n, account, partition)) for n in names)

    def remove(shape: tuple[str, str], names: list[str]) -> Command:
        return Command(("remove", "user", "where", f"name={','.join(names)}",
                        f"account={shape[0]}", f"partition={shape[1]}", f"cluster={cluster}"),
                       target(shape[0], shape[1], names))

    mod_cmds = _grouped(modifies, lambda shape, names: Command(
        ("modify", "user", "where", f"name={','.join(names)}", f"account={shape[0]}",
         f"partition={shape[1]}", f"cluster={cluster}", "set", *shape[2]),
        target(shape[0], shape[1], names)))
    return _Associations(mod_cmds, _grouped(stale_plain, remove),
                         _grouped(stale_default, remove),
                         tuple((str(key), qos) for key, qos in sorted(dropped)))


def default_rows_after(desired: SlurmState, actual: SlurmState,
                       wanted: dict[str, str] | None = None) -> frozenset[AssocKey]:
    """Which actual association rows will be flagged default once the default-account
    step has run: moving a user's default flags all their rows on the new account and
    unflags the rest; users whose default stays keep their flags."""
    if wanted is None:
        wanted = wanted_default_accounts(desired, actual)
    moved = {user: account for user, account in wanted.items()
             if actual.default_accounts.get(user) != account}
    return frozenset(key for key in actual.associations
                     if (key.account == moved[key.user] if key.user in moved
                         else key in actual.default_rows))


def wanted_default_accounts(desired: SlurmState, actual: SlurmState) -> dict[str, str]:
    """The default account every associated user should end up with.

    The site's default account when the user has an association in it; else their
    current default if they keep an association there; else the first of their accounts.
    Every associated user gets one, so no delete can hit a default association.
    """
    pairs = desired.user_account_pairs()
    # filters of (user, account) pairs, in C: one Python step per user only for those
    # whose default is neither the site's nor their current one (new users). A converged
    # site takes the shortcuts: every current default still an association's, the
    # site's defaults already the current ones, one default per pair.
    current, site = actual.default_accounts, desired.default_accounts
    wanted = (dict(current) if pairs.issuperset(current.items())
              else dict(filter(pairs.__contains__, current.items())))
    if not site.items() <= current.items():
        wanted.update(filter(pairs.__contains__, site.items()))
    if len(wanted) != len(pairs) and not all(map(wanted.__contains__,
                                                 map(itemgetter(0), pairs))):
        users = desired.users()
        rest = users - wanted.keys()  # the first of their accounts, in one pass
        theirs = (pairs if len(rest) == len(users)  # everyone (a new cluster): no filter
                  else compress(pairs, map(rest.__contains__, map(itemgetter(0), pairs))))
        if len(pairs) == len(users):  # one account each: that one, in C
            wanted.update(theirs)
            return wanted
        first: dict[str, str] = {}
        for user, account in theirs:
            if user not in first or account < first[user]:
                first[user] = account
        wanted.update(first)
    return wanted


def _plan_defaults(desired: SlurmState, actual: SlurmState, first_account: dict[str, str],
                   wanted: dict[str, str]) -> list[Command]:
    """Default-account changes, batched per account. A user new on the cluster gets the
    account of their first added association as default, so no change is planned when
    that is already the wanted one."""
    cluster = desired.cluster
    current = actual.default_accounts
    if wanted == current:  # one comparison in C
        return []
    differ = filterfalse(current.items().__contains__, wanted.items())  # in C as well
    if not current:  # a new cluster: only users whose first add names another account
        changes = [(account, user) for user, account in
                   filterfalse(first_account.items().__contains__, differ)]
    else:
        changes = [(account, user) for user, account in differ
                   if (current.get(user) or first_account.get(user)) != account]
    return _grouped(changes, lambda account, names: Command(
        ("modify", "user", "where", f"name={','.join(names)}", f"cluster={cluster}", "set",
         f"defaultaccount={account}"), tuple(f"default {n}={account}" for n in names)))


def _plan_coordinators(desired: SlurmState,
                       actual: SlurmState) -> tuple[list[Command], list[Command]]:
    adds, removes = [], []
    nobody: frozenset[str] = frozenset()
    for account in sorted(desired.accounts):
        want = desired.coordinators.get(account, nobody)
        have = actual.coordinators.get(account, nobody)
        if want == have:  # most accounts: no set arithmetic, no sorting
            continue
        if missing := sorted(want - have):
            adds.append(Command(("add", "coordinator", f"account={account}",
                                 f"names={','.join(missing)}"),
                                tuple(f"coordinator {account}:{n}" for n in missing)))
        if extra := sorted(have - want):
            removes.append(Command(("remove", "coordinator", f"account={account}",
                                    f"names={','.join(extra)}"),
                                   tuple(f"coordinator {account}:{n}" for n in extra)))
    return adds, removes


def plan(desired: SlurmState, actual: SlurmState) -> Plan:
    """Everything that must change for ``actual`` to equal ``desired``, in order."""
    if desired.cluster != actual.cluster:
        raise ValueError(f"desired state is for {desired.cluster!r}, actual for "
                         f"{actual.cluster!r}")
    if desired.quota_only:
        return plan_quota_only(desired, actual)
    conflicts: list[str] = []
    renames, actual = plan_renames(desired, actual)
    qos_add, qos_mod, qos_del = _plan_qos(desired, actual, conflicts)
    acc_add, acc_mod, acc_del = _plan_accounts(desired, actual)
    diff = _diff(desired, actual)
    adds = _plan_adds(desired, actual, diff.missing)
    assoc_add = adds.commands
    wanted_defaults = wanted_default_accounts(desired, actual)
    assocs = _plan_associations(desired, actual, diff, wanted_defaults)
    assoc_mod, assoc_del, assoc_del_default = (assocs.modifies, assocs.deletes,
                                               assocs.default_deletes)
    defaults = _plan_defaults(desired, actual, adds.first_account, wanted_defaults)
    coord_add, coord_del = _plan_coordinators(desired, actual)
    by_label = {
        "rename users": renames, "add qos": qos_add, "modify qos": qos_mod, "add accounts": acc_add,
        "modify accounts": acc_mod, "add associations": assoc_add,
        "modify associations": assoc_mod, "set default accounts": defaults,
        "add coordinators": coord_add, "remove coordinators": coord_del,
        "delete associations": assoc_del, "delete default associations": assoc_del_default,
        "delete qos": qos_del, "delete accounts": acc_del,
    }
    batches = tuple(Batch(label, kind, tuple(by_label[label]))
                    for label, kind in BATCH_ORDER if by_label[label])
    return Plan(desired.cluster, batches, tuple(conflicts), tuple(desired.notes),
                qos_removed=assocs.qos_removed)


def plan_quota_only(desired: SlurmState, actual: SlurmState) -> Plan:
    """A quota-only site's plan: ``modify … set GrpTRESMins=…`` on the account rows and
    user associations whose GrpTRESMins differ, and nothing else, ever (no add, no
    delete, no other column). ``desired`` must have ``actual``'s rows
    (``slurm_quota.quota_only_state``); anything else is a bug, refused."""
    if (desired.accounts.keys() != actual.accounts.keys()
            or desired.associations.keys() != actual.associations.keys()):
        raise ValueError("a quota-only desired state must hold exactly the actual rows")
    cluster = desired.cluster
    accounts = [(tres_mins_args(want.grp_tres_mins, have.grp_tres_mins), name)
                for name, want in sorted(desired.accounts.items())
                if want.grp_tres_mins != (have := actual.accounts[name]).grp_tres_mins]
    have_rows = actual.associations
    want_rows = desired.associations
    # the rows that differ at all, found in C (a site has 60k; a few carry blocks)
    differ = compress(want_rows, map(ne, map(have_rows.get, want_rows), want_rows.values()))
    rows = [((key.account, key.partition,
              tres_mins_args(want_rows[key].grp_tres_mins, have_rows[key].grp_tres_mins)),
             key.user) for key in differ
            if want_rows[key].grp_tres_mins != have_rows[key].grp_tres_mins]
    acc_mod = _grouped(accounts, lambda shape, names: Command(
        ("modify", "account", "where", f"name={','.join(names)}", f"cluster={cluster}",
         "set", *shape), tuple(f"account {n}" for n in names)))
    assoc_mod = _grouped(rows, lambda shape, names: Command(
        ("modify", "user", "where", f"name={','.join(names)}", f"account={shape[0]}",
         f"partition={shape[1]}", f"cluster={cluster}", "set", *shape[2]),
        tuple(str(AssocKey(n, shape[0], shape[1])) for n in names)))
    batches = tuple(Batch(label, "modify", tuple(commands)) for label, commands in
                    (("modify accounts", acc_mod), ("modify associations", assoc_mod))
                    if commands)
    return Plan(cluster, batches, (), tuple(desired.notes), quota_only=True)


def plan_renames(desired: SlurmState, actual: SlurmState) -> tuple[list[Command], SlurmState]:
    """``modify user where name=OLD set newname=NEW`` for every user the store renamed
    whom slurmdbd still knows by an old name, and ``actual`` as it will be afterwards.

    Renaming keeps the user's default account in slurmctld and their fair-share usage;
    adding the new name and deleting the old one leaves slurmctld with
    ``DefAccount=(null)`` for the new name (docs/sacctmgr-notes.md §11). Only when the
    old name is no longer wanted and the new one is wanted but absent: a name reused by
    someone else since, or a rename already applied, plans nothing. The user record is
    global in slurmdbd, so this renames them on every cluster sharing it.
    """
    if not desired.renames:
        return [], actual
    present = actual.users() | actual.default_accounts.keys()
    wanted = desired.users()
    moves = {old: new for old, new in desired.renames.items()
             if old in present and old not in wanted and new in wanted
             and new not in present}
    if not moves:
        return [], actual
    commands = [Command(("modify", "user", "where", f"name={old}", "set", f"newname={new}"),
                        (f"rename {old}={new}",)) for old, new in sorted(moves.items())]

    def name(user: str) -> str:
        return moves.get(user, user)

    renamed = replace(
        actual,
        associations={AssocKey(name(k.user), k.account, k.partition): v
                      for k, v in actual.associations.items()},
        default_accounts={name(u): a for u, a in actual.default_accounts.items()},
        default_rows=frozenset(AssocKey(name(k.user), k.account, k.partition)
                               for k in actual.default_rows),
        coordinators={a: frozenset(name(u) for u in users)
                      for a, users in actual.coordinators.items()})
    return commands, renamed

"""Quota enforcement inside Slurm: which associations the sync blocks, and with what.

cheeto's usage ledger (plus adjustments) is the source of truth for CPU- and GPU-minute
quotas; Slurm only gets the verdict. A user or an account that has used its whole quota
in the current period gets ``GrpTRESMins=cpu=0`` (out of CPU minutes) and/or
``GrpTRESMins=gres/gpu=0`` (out of GPU minutes) on the rows that carry it; a subject
whose money used has reached its budget (issue 28) gets both (money is spent by CPUs and
GPUs alike):

- a *user's* quota covers all their work at the site, so every association of the user
  on the site's cluster is blocked (``AssocGrpCPUMinutesLimit`` for their new jobs);
- an *account's* quota is written on the account's own row, which Slurm applies to every
  association under it (``AssocGrpCPUMinutesLimit`` / ``AssocGrpGRESMinutes`` for every
  member's new jobs).

Why a zero limit and not "Slurm's raw usage + what is left" or GrpTRESMins = quota with
``PriorityDecayHalfLife=0`` and a usage reset: the ledger has what Slurm's decayed usage
cannot (GPU-type factors, adjustments, carry-over, explicit periods, one quota across
several accounts and partitions), a zero never drifts (a balance written as a limit
changes every ``PriorityCalcPeriod`` while jobs run, so every sync would rewrite it), and
usage >= 0 always holds, so a zero blocks whatever Slurm's own usage counters say. It
needs ``AccountingStorageEnforce=…,limits,safe``: without ``safe`` slurmctld *kills*
running jobs of an association at or over its GrpTRESMins (measured on 22.05: the job
ended TIMEOUT about 30 s after the limit was set). docs/sacctmgr-notes.md §12 has the
measurements; docs/guides/operator.md ("Quotas and usage") the site settings.

On a quota-only site (``SiteSlurmSettings.mode``, what a slurm-quota site is) the sync
builds no state from the store: ``quota_only_state`` takes the cluster as read and
changes only the keys of GrpTRESMins blocks are made of (``cpu``, ``gres/gpu``) on the
rows of the users and accounts found there, every one judged (a name the store does not
hold gets the site's default quotas); every other column stays as found.

Reads: the site's quotas and defaults (2 queries; nothing more when no limit is in
force), then ``queries.quota.quota_status`` (adjustments + the running totals of each
month of each (kind, period window), issue 31): a constant number of queries whatever
the number of users or jobs, and O(subjects) documents, never O(jobs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from ...models.quota import Quota, QuotaDefaults
from ...queries.quota import QuotaStatus, ResourceStatus, quota_status, site_quotas
from .state import TRES, AssocKey, AssocState, SlurmState, tres

GPU_TRES = "gres/gpu"  # counts every GPU type; typed keys are left to the site
TRES_OF = {"cpu": "cpu", "gpu": GPU_TRES}
BLOCK_KEYS = frozenset(TRES_OF.values())  # the GrpTRESMins keys a quota-only sync owns
QUOTA_ONLY_NOTE = ("quota-only site: accounts, associations and their other limits and QOS "
                   "are left as found; only quota blocks (GrpTRESMins cpu, gres/gpu) on the "
                   "users and accounts found on the cluster are enforced")


@dataclass(frozen=True)
class QuotaBlocks:
    """What to block: user -> TRES (all their associations), account -> TRES (its row),
    and one readable line per (kind, name) for the plan's notes."""

    users: Mapping[str, TRES] = field(default_factory=dict)
    accounts: Mapping[str, TRES] = field(default_factory=dict)
    notes: Mapping[tuple[str, str], str] = field(default_factory=dict)


def out_of(usage: ResourceStatus) -> bool:
    """Used (ledger + adjustments) has reached the quota; running jobs do not count
    (they are charged when they end, and are never stopped)."""
    return usage.quota is not None and usage.used >= usage.quota


def blocks_from(statuses: Iterable[QuotaStatus]) -> QuotaBlocks:
    """Pure: the block of every subject out of CPU and/or GPU minutes."""
    users: dict[str, TRES] = {}
    accounts: dict[str, TRES] = {}
    notes: dict[tuple[str, str], str] = {}
    for status in statuses:
        spent = [(resource, usage) for resource, usage in status.resources()
                 if out_of(usage)]
        if not spent:
            continue
        keys = {TRES_OF[r] for r, _ in spent if r in TRES_OF}
        if any(r == "budget" for r, _ in spent):
            keys = set(BLOCK_KEYS)
        (users if status.kind == "user" else accounts)[status.name] = tres(
            {key: 0 for key in sorted(keys)})
        what = ", ".join(f"budget {usage.used:.2f} of {usage.quota:.2f}" if resource == "budget"
                         else f"{resource.upper()} {usage.used:.1f} of {usage.quota:.1f} min"
                         for resource, usage in spent)
        notes[(status.kind, status.name)] = (
            f"quota: {status.kind} {status.name} is out of quota ({what} in the period "
            f"from {status.start:%Y-%m-%d}): new jobs are held")
    return QuotaBlocks(users, accounts, notes)


def limits_in_force(quotas: list[Quota], defaults: QuotaDefaults | None) -> bool:
    """Some limit is in force at the site (a quota's own, or one it follows from the
    defaults: ``Quota.resolved``)."""
    if any(r.cpu_minutes is not None or r.gpu_minutes is not None or r.budget is not None
           for r in (q.resolved(defaults) for q in quotas)):
        return True
    return defaults is not None and any(
        getattr(defaults, name) is not None
        for kind in ("user", "account")
        for name in (f"{kind}_cpu_minutes", f"{kind}_gpu_minutes", f"{kind}_budget"))


async def quota_blocks(site: str, now: datetime, *, users: Iterable[str] = (),
                       accounts: Iterable[str] = ()) -> QuotaBlocks:
    """The blocks at ``site`` now. ``users``/``accounts`` (the desired state's) are
    judged even without a quota of their own or any usage: a default quota of 0 or a
    debit adjustment can put them out too."""
    quotas, defaults = await site_quotas(site)
    if not limits_in_force(quotas, defaults):
        return QuotaBlocks()
    also = [("user", u) for u in users] + [("account", a) for a in accounts]
    return blocks_from(await quota_status(site, now, also=also))


def with_blocks(state: SlurmState, blocks: QuotaBlocks) -> SlurmState:
    """``state`` with the blocks written on its rows (pure). Blocks of users or accounts
    without rows on this cluster have nothing to hold and are left out."""
    if not blocks.users and not blocks.accounts:
        return state
    associations: dict[AssocKey, AssocState] = dict(state.associations)
    for key, assoc in state.associations.items():
        if (block := blocks.users.get(key.user)) is not None:
            associations[key] = assoc._replace(grp_tres_mins=block)
    accounts = {name: (replace(acc, grp_tres_mins=blocks.accounts[name])
                       if name in blocks.accounts else acc)
                for name, acc in state.accounts.items()}
    present = {("user", key.user) for key in state.associations}
    present |= {("account", name) for name in state.accounts}
    notes = [line for subject, line in sorted(blocks.notes.items()) if subject in present]
    # the same keys: the pairs carry over (``SlurmState.built_pairs``)
    return replace(state, associations=associations, accounts=accounts,
                   notes=(*state.notes, *notes),
                   built_pairs=(associations, state.user_account_pairs()))


async def apply_quota_blocks(state: SlurmState, site: str, now: datetime) -> SlurmState:
    """The desired state's hook (one call from ``slurm_desired.desired_state``)."""
    blocks = await quota_blocks(site, now, users=state.users(),
                                accounts=state.accounts)
    return with_blocks(state, blocks)


def _with_block(found: TRES, block: TRES) -> TRES:
    """``found`` GrpTRESMins with the block keys set to ``block``'s (absent: cleared)
    and every other key kept."""
    if not found:
        return block
    return tres({**{k: v for k, v in found if k not in BLOCK_KEYS}, **dict(block)})


def quota_only_state(actual: SlurmState, blocks: QuotaBlocks) -> SlurmState:
    """Pure: the desired state of a quota-only site, ``actual`` with only the block keys
    of GrpTRESMins changed: set on the rows of users and accounts out of quota, cleared
    on the others. Same rows, same everything else, so the plan can only modify
    GrpTRESMins (``slurm_plan.plan`` plans nothing else for a ``quota_only`` state)."""
    associations: dict[AssocKey, AssocState] = dict(actual.associations)
    no_block: TRES = ()
    for key, assoc in actual.associations.items():
        block = blocks.users.get(key.user, no_block)
        if block or assoc.grp_tres_mins:  # most rows: neither, nothing to compute
            wanted = _with_block(assoc.grp_tres_mins, block)
            if wanted != assoc.grp_tres_mins:
                associations[key] = assoc._replace(grp_tres_mins=wanted)
    accounts = dict(actual.accounts)
    for name, account in actual.accounts.items():
        wanted = _with_block(account.grp_tres_mins, blocks.accounts.get(name, no_block))
        if wanted != account.grp_tres_mins:
            accounts[name] = replace(account, grp_tres_mins=wanted)
    present = {("user", user) for user in actual.users()}
    present |= {("account", name) for name in actual.accounts}
    notes = [line for subject, line in sorted(blocks.notes.items()) if subject in present]
    return replace(actual, associations=associations, accounts=accounts,
                   notes=(QUOTA_ONLY_NOTE, *notes), quota_only=True,
                   built_pairs=(associations, actual.user_account_pairs()))


async def apply_quota_only(actual: SlurmState, site: str, now: datetime) -> SlurmState:
    """The desired state of a quota-only site: every user and account found on the
    cluster is judged (``also``), so default quotas reach names the store does not
    hold."""
    blocks = await quota_blocks(site, now, users=actual.users(), accounts=actual.accounts)
    return quota_only_state(actual, blocks)

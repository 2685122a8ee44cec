"""Quota status: used (ledger + adjustments), preallocated, quota, percent.

Query count does not grow with the number of jobs or subjects: the quotas and defaults
of the site (2 queries), its adjustments (1), and per distinct (kind, period window) in
play (each quota's period, the defaults' period, and the previous periods of those that
carry over) one read of the running totals per month of the window (issue 31:
``queries.quota_totals``; O(subjects), not O(jobs)), or, on a site whose totals were
never built, one ledger aggregation. Adjustments are not in the totals: they are admin
changes (a handful per subject), read as before and added per window.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from dataclasses import field as dc_field
from datetime import datetime
from typing import Any

from ..models.base import select, select_one
from ..models.quota import (
    Quota,
    QuotaAdjustment,
    QuotaDefaults,
    QuotaNotice,
    previous_window,
)
from ..models.usage import FactorTable, UsageRecord
from .quota_totals import TotalsReader, totals_built
from .usage import used_by

Window = tuple[datetime, datetime]


@dataclass(frozen=True)
class Reserved:
    """Minutes reserved by running jobs, per user and per account (already charged with
    the GPU factors in force now). ``known`` is False when squeue was not reachable."""

    users: dict[str, tuple[float, float]]
    accounts: dict[str, tuple[float, float]]
    known: bool = True
    note: str | None = None


NO_RESERVATIONS = Reserved({}, {}, known=False, note="squeue not asked")


def reservations(jobs: Sequence[Any], factors: FactorTable, now: datetime) -> Reserved:
    """Sum ``adapters.squeue.RunningJob``s per user and account: CPUs x limit and
    GPUs x limit x factor. Jobs without a limit reserve nothing (nothing bounds them)."""
    users: dict[str, tuple[float, float]] = {}
    accounts: dict[str, tuple[float, float]] = {}
    for job in jobs:
        if job.limit_minutes is None:
            continue
        cpu = job.cpus * job.limit_minutes
        gpu = sum(n * job.limit_minutes * factors.factor(kind, now) for kind, n in job.gpus)
        for table, name in ((users, job.user), (accounts, job.account)):
            old = table.get(name, (0.0, 0.0))
            table[name] = (old[0] + cpu, old[1] + gpu)
    return Reserved(users, accounts)


@dataclass
class ResourceStatus:
    used: float
    preallocated: float
    quota: float | None  # None: unlimited
    carried: float = 0.0
    # where the quota comes from: own (set on the subject's quota), default (the site's
    # defaults: no quota of its own, or one that follows them for this resource) or none
    source: str = "none"

    @property
    def percent(self) -> float | None:
        if self.quota is None:
            return None
        if self.quota == 0:
            return 0.0 if self.used + self.preallocated == 0 else 100.0
        return round(100 * (self.used + self.preallocated) / self.quota, 1)

    def as_dict(self) -> dict[str, Any]:
        return {"used": round(self.used, 2), "preallocated": round(self.preallocated, 2),
                "quota": None if self.quota is None else round(self.quota, 2),
                "carried_over": round(self.carried, 2), "percent": self.percent,
                "source": self.source}


@dataclass
class QuotaStatus:
    kind: str  # user | account
    name: str
    source: str  # own | default | none
    period: str
    start: datetime
    end: datetime
    cpu: ResourceStatus
    gpu: ResourceStatus
    # money (issue 28): used = the ledger's cost + money adjustments, quota = the budget
    # (None: no budget); preallocated is 0 here (squeue's jobs carry no partition price;
    # the submit-time check reserves money itself)
    budget: ResourceStatus = dc_field(default_factory=lambda: ResourceStatus(0.0, 0.0, None))

    def resources(self) -> tuple[tuple[str, ResourceStatus], ...]:
        """(cpu|gpu|budget, status): what thresholds, blocks and checks walk."""
        return (("cpu", self.cpu), ("gpu", self.gpu), ("budget", self.budget))

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "source": self.source,
                "period": self.period, "start": self.start, "end": self.end,
                "cpu_minutes": self.cpu.as_dict(), "gpu_minutes": self.gpu.as_dict(),
                "budget": self.budget.as_dict()}


@dataclass
class _Limits:
    source: str
    period: str
    window: Window
    cpu: float | None
    gpu: float | None
    carry_over: bool
    cpu_source: str = "none"
    gpu_source: str = "none"
    budget: float | None = None
    budget_source: str = "none"


async def site_quotas(site: str) -> tuple[list[Quota], QuotaDefaults | None]:
    """A site's quota documents and its defaults (two reads): what decides whether any
    limit is in force there (``sync.slurm.quota.limits_in_force``) and what every status
    starts from. Callers outside ``queries/`` read quotas through this (issue 32)."""
    quotas = await Quota.find({"site": site}).to_list()
    return quotas, await QuotaDefaults.find_one({"site": site})


async def check_subject(site: str, *, user: str | None = None,
                        account: str | None = None) -> None:
    """``NotFound`` for a quota view of a name nobody holds: a user or group the store
    knows, or a name with usage or a quota at the site, is shown; anything else would
    show the site's defaults as if they were its quota (a typo looks like a real answer).

    Why usage counts: the ledger holds sacct's users, including people the store no
    longer (or never) held; their usage against the defaults is a real answer."""
    from ..errors import NotFound
    from ..models import Group, User

    for kind, name, model, field in (("user", user, User, "user"),
                                     ("group", account, Group, "account")):
        if name is None:
            continue
        if await model.get_pymongo_collection().find_one({"name": name}, {"_id": 1}):
            continue
        if await _has_usage(site, field, name) or await Quota.get_pymongo_collection(
                ).find_one({"site": site, field: name}, {"_id": 1}):
            continue
        raise NotFound(f"{kind} {name!r} does not exist"
                       + (f" and has no usage at {site}" if kind == "user" else ""))


async def quota_status(site: str, now: datetime, *, user: str | None = None,
                       account: str | None = None,
                       reserved: Reserved = NO_RESERVATIONS,
                       also: Iterable[tuple[str, str]] = ()) -> list[QuotaStatus]:
    """The status of one subject, or (neither given) of every user and account that has
    a quota or used anything in the defaults' current period, plus the ``also``
    subjects ((kind, name); the Slurm sync passes everyone it associates)."""
    found, defaults = await site_quotas(site)
    quotas = {(("user", q.user) if q.user is not None else ("account", q.account)): q
              for q in found}
    default_window = defaults.window(now) if defaults else (
        QuotaDefaults.model_construct(period="none").window(now))
    subjects: list[tuple[str, str]]
    if user is not None:
        subjects = [("user", user)]
    elif account is not None:
        subjects = [("account", account)]
    else:
        subjects = list(dict.fromkeys([*quotas, *also]))
    limits = {s: _limits_of(s, quotas.get(s), defaults, now) for s in subjects}
    usage = await _UsageCache.of(site)
    if user is None and account is None:  # everyone who used the site this period
        for kind in ("user", "account"):
            for name in await usage.get(kind, default_window):
                if (kind, name) not in limits:
                    limits[(kind, name)] = _limits_of((kind, name), None, defaults, now)
        for kind, lim in [(k, v) for (k, _), v in limits.items()]:
            await usage.get(kind, lim.window)  # site-wide: one aggregation per window
            previous = previous_window(lim.period, lim.window) if lim.carry_over else None
            if previous is not None:
                await usage.get(kind, previous)
    adjustments = await QuotaAdjustment.find({"site": site}).to_list()
    out = []
    nothing = (0.0, 0.0, 0.0)
    for (kind, name), lim in sorted(limits.items()):
        used_cpu, used_gpu, used_money = (await usage.get(kind, lim.window, name)).get(
            name, nothing)
        adj_cpu, adj_gpu, adj_money = _adjusted(adjustments, kind, name, lim.window)
        taken = (reserved.users if kind == "user" else reserved.accounts).get(name, (0.0, 0.0))
        carried = nothing
        previous = previous_window(lim.period, lim.window) if lim.carry_over else None
        if previous is not None:
            prev = (await usage.get(kind, previous, name)).get(name, nothing)
            p_adj = _adjusted(adjustments, kind, name, previous)
            carried = (_left(lim.cpu, prev[0] + p_adj[0]), _left(lim.gpu, prev[1] + p_adj[1]),
                       _left(lim.budget, prev[2] + p_adj[2]))
        out.append(QuotaStatus(
            kind=kind, name=name, source=lim.source, period=lim.period,
            start=lim.window[0], end=lim.window[1],
            cpu=ResourceStatus(max(0.0, used_cpu + adj_cpu), taken[0],
                               None if lim.cpu is None else lim.cpu + carried[0], carried[0],
                               lim.cpu_source),
            gpu=ResourceStatus(max(0.0, used_gpu + adj_gpu), taken[1],
                               None if lim.gpu is None else lim.gpu + carried[1], carried[1],
                               lim.gpu_source),
            budget=ResourceStatus(max(0.0, used_money + adj_money), 0.0,
                                  None if lim.budget is None else lim.budget + carried[2],
                                  carried[2], lim.budget_source)))
    return out


async def _has_usage(site: str, kind: str, name: str) -> bool:
    """``name`` has a ledger record at ``site``: from its totals once built (one indexed
    read), else the ledger (a two-field match the embedded store scans for)."""
    if await totals_built(site):
        return await TotalsReader(site).has_usage(kind, name)
    return await UsageRecord.get_pymongo_collection().find_one(
        {"site": site, kind: name}, {"_id": 1}) is not None


def _left(quota: float | None, used: float) -> float:
    """What carries over: the unused part, at most one period's quota."""
    if quota is None:
        return 0.0
    return max(0.0, min(quota, quota - max(0.0, used)))


def _limits_of(subject: tuple[str, str], quota: Quota | None,
               defaults: QuotaDefaults | None, now: datetime) -> _Limits:
    """The limits in force: a quota's own values, with what it follows read from the
    site's defaults (``Quota.resolved``); else the defaults; else none."""
    kind = subject[0]
    if quota is not None:
        q = quota.resolved(defaults)
        cpu_source, gpu_source, budget_source = (
            "default" if q.follows(r) else "own" for r in ("cpu", "gpu", "budget"))
        return _Limits("own", q.period, q.window(now), q.cpu_minutes, q.gpu_minutes,
                       q.carry_over, cpu_source, gpu_source, q.budget, budget_source)
    if defaults is not None:
        return _Limits("default", defaults.period, defaults.window(now),
                       getattr(defaults, f"{kind}_cpu_minutes"),
                       getattr(defaults, f"{kind}_gpu_minutes"), defaults.carry_over,
                       "default", "default", getattr(defaults, f"{kind}_budget", None),
                       "default")
    none = QuotaDefaults.model_construct(period="none")
    return _Limits("none", "none", none.window(now), None, None, False)


def _adjusted(adjustments: list[QuotaAdjustment], kind: str, name: str,
              window: Window) -> tuple[float, float, float]:
    lo, hi = int(window[0].timestamp()), int(window[1].timestamp())
    cpu = gpu = money = 0.0
    for a in adjustments:
        if getattr(a, kind) == name and lo <= a.at_epoch < hi:
            cpu += a.cpu_minutes
            gpu += a.gpu_minutes
            money += a.money
    return cpu, gpu, money


class _UsageCache:
    """Used per (kind, window): from the running totals (``queries.quota_totals``) once
    the site's were built, else (a store from before them) one ledger aggregation per
    (kind, window), shared by every subject, or narrowed to a single subject."""

    def __init__(self, site: str, totals: bool = False) -> None:
        self.site = site
        self.totals = TotalsReader(site) if totals else None
        self.cache: dict[tuple[str, Window, str | None],
                         dict[str, tuple[float, float, float]]] = {}
        self.queries = 0

    @classmethod
    async def of(cls, site: str) -> _UsageCache:
        return cls(site, await totals_built(site))

    async def get(self, kind: str, window: Window,
                  name: str | None = None) -> dict[str, tuple[float, float, float]]:
        if (kind, window, None) in self.cache:
            return self.cache[(kind, window, None)]
        key = (kind, window, name)
        if key not in self.cache:
            self.queries += 1
            if self.totals is not None:
                self.cache[key] = await self.totals.used(kind, window, name)
            else:
                self.cache[key] = await used_by(self.site, window[0], window[1], kind,
                                                None if name is None else [name])
        return self.cache[key]


@dataclass(frozen=True)
class InForce:
    """The ledger records of ``site`` that ended before a cut yet count in a quota period
    still in force: deleting them refunds that quota. ``start`` is the earliest such
    period's start (None when there are none)."""

    site: str
    records: int
    start: datetime | None


def _span(fields: Quota | QuotaDefaults, limits: tuple[float | None, ...],
          now: datetime) -> Window | None:
    """The span of ledger records that limits over ``fields``' period read now: the
    current period, from the previous one's start with carry-over; None without any
    limit (an unlimited quota refunds nothing)."""
    if all(limit is None for limit in limits):
        return None
    window = fields.window(now)
    previous = previous_window(fields.period, window) if fields.carry_over else None
    return (previous[0] if previous else window[0]), window[1]


async def usage_in_force(site: str, before: datetime, now: datetime,
                         session: Any = None) -> InForce:
    """What pruning ``site``'s ledger before ``before`` would take from quotas in force:
    each user's and account's records in the period its limits read now (its own quota,
    what that follows from the defaults, else the defaults; ``_span``).
    Subjects sharing a window are one condition, so the queries are the quotas, the
    defaults, one probe per distinct window until one finds a record, and one count."""
    quotas = await select(Quota, session, site=site)
    defaults = await select_one(QuotaDefaults, session, site=site)
    cut = int(before.timestamp())
    spans: dict[tuple[str, Window], list[str]] = {}
    own: dict[str, list[str]] = {"user": [], "account": []}
    for quota in quotas:
        name = quota.user or quota.account or ""
        own[quota.kind].append(name)
        q = quota.resolved(defaults)
        span = _span(q, (q.cpu_minutes, q.gpu_minutes, q.budget), now)
        if span is not None:
            spans.setdefault((quota.kind, span), []).append(name)
    clauses: list[tuple[datetime, dict[str, Any]]] = []
    for (kind, (lo, hi)), names in spans.items():
        clauses.append((lo, {kind: {"$in": names}, **_ended(lo, hi, cut)}))
    for kind in ("user", "account"):
        span = None if defaults is None else _span(defaults, (
            getattr(defaults, f"{kind}_cpu_minutes"), getattr(defaults, f"{kind}_gpu_minutes"),
            getattr(defaults, f"{kind}_budget")), now)
        if span is not None:  # everyone without a quota of their own
            clauses.append((span[0], {kind: {"$nin": own[kind]}, **_ended(*span, cut)}))
    clauses = sorted((c for c in clauses if c[1]["end_epoch"]["$gte"] < cut),
                     key=lambda c: c[0])
    collection = UsageRecord.get_pymongo_collection()
    for start, clause in clauses:
        if await collection.find_one({"site": site, **clause}, {"_id": 1}, session=session):
            count = await collection.count_documents(
                {"site": site, "$or": [c for _, c in clauses]}, session=session)
            return InForce(site, count, start)
    return InForce(site, 0, None)


def _ended(lo: datetime, hi: datetime, cut: int) -> dict[str, Any]:
    return {"end_epoch": {"$gte": int(lo.timestamp()), "$lt": min(int(hi.timestamp()), cut)}}


@dataclass(frozen=True)
class ThresholdPassed:
    """A subject that passed a quota threshold (its highest one) since a time: a line of
    the operator digest."""

    site: str
    kind: str
    name: str
    resource: str
    threshold: int
    percent: float
    period_start: str
    notified: str  # who was told

    @property
    def blocked(self) -> bool:
        return self.threshold >= 100


async def thresholds_passed(since: datetime, now: datetime) -> list[ThresholdPassed]:
    """Every (site, subject, resource) that was sent a threshold notice in [since, now),
    with the highest threshold passed; one query (``noticed_epoch``, an integer)."""
    found = await QuotaNotice.find({"noticed_epoch": {"$gte": int(since.timestamp()),
                                                      "$lt": int(now.timestamp())}}).to_list()
    top: dict[tuple[str, str, str, str], QuotaNotice] = {}
    for notice in found:
        key = (notice.site, notice.kind, notice.subject, notice.resource)
        if key not in top or notice.threshold > top[key].threshold:
            top[key] = notice
    return [ThresholdPassed(n.site, n.kind, n.subject, n.resource, n.threshold,
                            round(n.percent, 1), f"{n.period_start:%Y-%m-%d}",
                            ", ".join(n.to) or "nobody")
            for _, n in sorted(top.items())]


@dataclass(frozen=True)
class AccountSummary:
    """One account's line of the platform summary (hours; percent of the quota)."""

    account: str
    source: str
    period: str
    cpu_used_h: float
    cpu_quota_h: float | None
    cpu_percent: float | None
    gpu_used_h: float
    gpu_quota_h: float | None
    gpu_percent: float | None
    # money (issue 28): what the account's jobs cost in its period (+ money adjustments),
    # its budget and percent; shown when the site has rates or budgets
    cost: float = 0.0
    budget: float | None = None
    budget_percent: float | None = None

    @property
    def blocked(self) -> bool:
        """Out of CPU or GPU minutes or of budget: the Slurm sync holds its members' new
        jobs."""
        return any(p is not None and p >= 100 and q is not None
                   for p, q in ((self.cpu_percent, self.cpu_quota_h),
                                (self.gpu_percent, self.gpu_quota_h),
                                (self.budget_percent, self.budget)))

    def as_dict(self) -> dict[str, Any]:
        return {**vars(self), "blocked": self.blocked}


SUMMARY_COLUMNS = ("account", "source", "period", "cpu_used_h", "cpu_quota_h",
                   "cpu_percent", "gpu_used_h", "gpu_quota_h", "gpu_percent", "blocked")
MONEY_COLUMNS = ("cost", "budget", "budget_percent")


def summary_columns(money: bool) -> list[str]:
    """The summary's columns: the money ones (before ``blocked``) when the site has a
    rate card or a budget."""
    if not money:
        return list(SUMMARY_COLUMNS)
    return [*SUMMARY_COLUMNS[:-1], *MONEY_COLUMNS, SUMMARY_COLUMNS[-1]]


async def platform_summary(site: str, now: datetime,
                           accounts: Iterable[str] = ()) -> list[AccountSummary]:
    """Every account at ``site`` (``accounts``: the site's Slurm accounts, listed even
    without a quota or usage) with used, quota and percent, the fullest first (by the
    higher of its CPU and GPU percent; accounts without any quota last, by usage)."""
    statuses = await quota_status(site, now, also=[("account", a) for a in accounts])
    rows = []
    for st in statuses:
        if st.kind != "account":
            continue

        def hours(value: float | None) -> float | None:
            return None if value is None else round(value / 60, 2)

        rows.append(AccountSummary(
            st.name, st.source, st.period, round(st.cpu.used / 60, 2), hours(st.cpu.quota),
            st.cpu.percent, round(st.gpu.used / 60, 2), hours(st.gpu.quota), st.gpu.percent,
            round(st.budget.used, 2),
            None if st.budget.quota is None else round(st.budget.quota, 2),
            st.budget.percent))

    def order(row: AccountSummary) -> tuple[float, float, str]:
        percents = [p for p in (row.cpu_percent, row.gpu_percent, row.budget_percent)
                    if p is not None]
        return (-max(percents) if percents else 1.0, -(row.cpu_used_h + row.gpu_used_h),
                row.account)
    return sorted(rows, key=order)

"""Quota and charging changes: quotas, site defaults, usage adjustments, GPU factors, rates.

Every change is an Operation with its History row. Amounts are minutes (the CLI parses
``600m``, ``10h``, ``unlimited``); None is unlimited. A field left out of ``SetQuota``
keeps its value; what a quota never set follows the site's defaults for its kind
(``Quota.follows_defaults``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator
from pymongo.asynchronous.client_session import AsyncClientSession

from ..errors import InvalidInput, NotFound
from ..models.base import select, select_one
from ..models.fields import FreeText, PosixName, SiteName, utcnow
from ..models.quota import (
    FOLLOWERS,
    MAX_MINUTES,
    MAX_MONEY,
    PERIOD_KEYS,
    Period,
    Quota,
    QuotaAdjustment,
    QuotaDefaults,
)
from ..models.usage import GpuFactor, UsageRate
from ..queries.group import get_group
from ..queries.site import get_site
from ..queries.user import get_user
from .base import OpArgs, Operation

KEEP = "keep"
Amount = float | None | Literal["keep"]
GPU_TYPE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
PAST_TOLERANCE = timedelta(minutes=5)  # clock skew between the admin's host and ours


def _as_utc(value: datetime) -> datetime:
    """A time without an offset is UTC (as the CLI reads one): the API's JSON can carry a
    naive ISO time, and comparing it with the store's aware times would raise."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


UtcTime = Annotated[datetime, AfterValidator(_as_utc)]


def _check(value: Amount, flag: str) -> Amount:
    if isinstance(value, float) and not 0 <= value <= MAX_MINUTES:
        raise ValueError(f"{flag} must be between 0 and {MAX_MINUTES:g} minutes")
    return value


def _check_money(value: Amount, flag: str) -> Amount:
    if isinstance(value, float) and not 0 <= value <= MAX_MONEY:
        raise ValueError(f"{flag} must be between 0 and {MAX_MONEY:g}")
    return value


class _Subject(OpArgs):
    site: SiteName
    user: PosixName | None = None
    account: PosixName | None = None

    @model_validator(mode="after")
    def _one(self) -> _Subject:
        if (self.user is None) == (self.account is None):
            raise ValueError("give exactly one of --user or --account")
        return self

    @property
    def label(self) -> str:
        return f"user {self.user}" if self.user is not None else f"account {self.account}"


async def _check_subject(args: _Subject, session: AsyncClientSession) -> None:
    await get_site(args.site, session)
    if args.user is not None:
        await get_user(args.user, session)
    else:
        await get_group(args.account, session)  # type: ignore[arg-type]


class _PeriodArgs(OpArgs):
    period: Period | Literal["keep"] = KEEP
    start: UtcTime | None = None
    end: UtcTime | None = None
    carry_over: bool | None = None


class SetQuota(Operation):
    """Set a user's or an account's quota. A field left out keeps its value; on a new
    quota it follows the site's defaults (``Quota.follows_defaults``: the amount of a
    resource not given, and the period while no ``period``/``start``/``end``/
    ``carry_over`` is given) until it is set here. Giving only ``carry_over`` pins the
    period the quota followed until then, with that change. Returns the quota with its
    limits in force (``Quota.resolved``)."""

    op_name = "set_quota"

    class Args(_Subject, _PeriodArgs):
        cpu_minutes: Amount = KEEP
        gpu_minutes: Amount = KEEP
        budget: Amount = KEEP  # money in the site's currency (the CLI checks it)

        @model_validator(mode="after")
        def _amounts(self) -> SetQuota.Args:
            _check(self.cpu_minutes, "--cpu")
            _check(self.gpu_minutes, "--gpu")
            _check_money(self.budget, "--budget")
            return self

    async def execute(self, session: AsyncClientSession) -> Quota:
        args = self.args
        await _check_subject(args, session)
        quota = await select_one(Quota, session, site=args.site, user=args.user,
                                 account=args.account)
        defaults = await select_one(QuotaDefaults, session, site=args.site)
        self.created = quota is None
        if quota is None:
            quota = Quota(site=args.site, user=args.user, account=args.account,
                          follows_defaults=list(FOLLOWERS))
        values = _changes(args, ("cpu_minutes", "gpu_minutes", "budget"))
        in_force = quota.resolved(defaults)
        pinned = {r for r in ("cpu", "gpu") if f"{r}_minutes" in values}
        if "budget" in values:
            pinned.add("budget")
        if any(k in values for k in PERIOD_KEYS):
            pinned.add("period")
            if quota.follows("period"):  # only --carry-over: from the period followed
                values = {**{k: getattr(in_force, k) for k in PERIOD_KEYS}, **values}
        self.before = ({k: getattr(in_force, k) for k in values} if not self.created
                       else {})
        self.pinned = sorted(p for p in pinned if quota.follows(p))
        if self.pinned:
            values["follows_defaults"] = [f for f in quota.follows_defaults
                                          if f not in pinned]
        _apply(quota, values)
        if self.created:
            await quota.insert(session=session)
        else:
            await quota.save(session=session)
        self.quota = quota.resolved(defaults)
        return self.quota

    def describe(self) -> dict[str, Any]:
        q = self.quota
        return {"site": q.site, "user": q.user, "account": q.account, "created": self.created,
                "cpu_minutes": q.cpu_minutes, "gpu_minutes": q.gpu_minutes,
                "budget": q.budget, "period": q.period, "carry_over": q.carry_over,
                "follows_defaults": list(q.follows_defaults), "pinned": self.pinned,
                "before": {k: str(v) for k, v in self.before.items()}}


def _changes(args: Any, amounts: tuple[str, ...]) -> dict[str, Any]:
    values: dict[str, Any] = {k: getattr(args, k) for k in amounts
                              if getattr(args, k) != KEEP}
    if args.period not in (KEEP, "explicit") and (args.start is not None
                                                  or args.end is not None):
        raise InvalidInput("--start/--end go with --period explicit")  # not dropped silently
    if args.period != KEEP:
        values["period"] = args.period
        values["period_start"] = args.start if args.period == "explicit" else None
        values["period_end"] = args.end if args.period == "explicit" else None
        if args.period in ("none", "explicit") and args.carry_over is None:
            values["carry_over"] = False
    elif args.start is not None or args.end is not None:
        raise InvalidInput("--start/--end go with --period explicit")
    if args.carry_over is not None:
        values["carry_over"] = args.carry_over
    return values


def _apply(doc: Any, values: dict[str, Any]) -> None:
    """Set every value, then validate the whole document once (period and dates
    depend on each other, so they cannot be checked one assignment at a time)."""
    data = {**doc.model_dump(), **values}
    checked = type(doc).model_validate(data)
    for name in values:
        object.__setattr__(doc, name, getattr(checked, name))


class RemoveQuota(Operation):
    """The subject falls back to the site's defaults."""

    op_name = "remove_quota"

    class Args(_Subject):
        pass

    async def execute(self, session: AsyncClientSession) -> None:
        quota = await select_one(Quota, session, site=self.args.site, user=self.args.user,
                                 account=self.args.account)
        if quota is None:
            raise NotFound(f"{self.args.label} has no quota at {self.args.site}")
        await quota.delete(session=session)

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "user": self.args.user, "account": self.args.account}


class SetQuotaDefaults(Operation):
    op_name = "set_quota_defaults"

    class Args(_PeriodArgs):
        site: SiteName
        user_cpu_minutes: Amount = KEEP
        user_gpu_minutes: Amount = KEEP
        account_cpu_minutes: Amount = KEEP
        account_gpu_minutes: Amount = KEEP
        user_budget: Amount = KEEP
        account_budget: Amount = KEEP

        @model_validator(mode="after")
        def _amounts(self) -> SetQuotaDefaults.Args:
            for name in ("user_cpu_minutes", "user_gpu_minutes", "account_cpu_minutes",
                         "account_gpu_minutes"):
                _check(getattr(self, name), f"--{name.removesuffix('_minutes')}")
            for name in ("user_budget", "account_budget"):
                _check_money(getattr(self, name), f"--{name.replace('_', '-')}")
            return self

    AMOUNTS = ("user_cpu_minutes", "user_gpu_minutes", "account_cpu_minutes",
               "account_gpu_minutes", "user_budget", "account_budget")

    async def execute(self, session: AsyncClientSession) -> QuotaDefaults:
        await get_site(self.args.site, session)
        defaults = await select_one(QuotaDefaults, session, site=self.args.site)
        self.created = defaults is None
        if defaults is None:
            defaults = QuotaDefaults(site=self.args.site)
        values = _changes(self.args, self.AMOUNTS)
        if not values:
            raise InvalidInput("nothing to set: give at least one quota or --period")
        _apply(defaults, values)
        if self.created:
            await defaults.insert(session=session)
        else:
            await defaults.save(session=session)
        self.defaults = defaults
        return defaults

    def describe(self) -> dict[str, Any]:
        d = self.defaults
        return {"site": d.site, **{k: getattr(d, k) for k in self.AMOUNTS},
                "period": d.period, "carry_over": d.carry_over}


class AdjustUsage(Operation):
    """A signed change to usage in the current period: negative credits, positive debits.
    ``money`` changes the money used against a budget (the site's currency)."""

    op_name = "adjust_usage"

    class Args(_Subject):
        cpu_minutes: float = Field(default=0.0, ge=-MAX_MINUTES, le=MAX_MINUTES)
        gpu_minutes: float = Field(default=0.0, ge=-MAX_MINUTES, le=MAX_MINUTES)
        money: float = Field(default=0.0, ge=-MAX_MONEY, le=MAX_MONEY)
        reason: FreeText = Field(min_length=1, max_length=500)
        at: datetime | None = None

        @model_validator(mode="after")
        def _something(self) -> AdjustUsage.Args:
            if not self.cpu_minutes and not self.gpu_minutes and not self.money:
                raise ValueError("give a non-zero --cpu, --gpu or --budget")
            return self

    async def execute(self, session: AsyncClientSession) -> QuotaAdjustment:
        await _check_subject(self.args, session)
        at = self.args.at or utcnow()
        self.adjustment = QuotaAdjustment(
            site=self.args.site, user=self.args.user, account=self.args.account,
            cpu_minutes=self.args.cpu_minutes, gpu_minutes=self.args.gpu_minutes,
            money=self.args.money, reason=self.args.reason, at=at,
            at_epoch=int(at.timestamp()))
        await self.adjustment.insert(session=session)
        return self.adjustment

    def describe(self) -> dict[str, Any]:
        a = self.adjustment
        return {"site": a.site, "user": a.user, "account": a.account,
                "cpu_minutes": a.cpu_minutes, "gpu_minutes": a.gpu_minutes,
                "money": a.money, "reason": a.reason, "at": a.at.isoformat()}


class SetGpuFactor(Operation):
    """A new version of a GPU type's factor from ``effective_from`` (default now) on.
    It must not lie in the past: jobs already charged keep their charge."""

    op_name = "set_gpu_factor"

    class Args(OpArgs):
        site: SiteName
        gpu_type: str = Field(pattern=GPU_TYPE_PATTERN)
        factor: float = Field(ge=0, le=1000)
        effective_from: UtcTime | None = None

    async def execute(self, session: AsyncClientSession) -> GpuFactor:
        await get_site(self.args.site, session)
        now = utcnow()
        # whole seconds: the store keeps milliseconds, and a version must compare equal to
        # itself when read back
        since = (self.args.effective_from or now).replace(microsecond=0)
        if since < now - PAST_TOLERANCE:
            raise InvalidInput("--from is in the past: jobs already charged keep their "
                               "charge, so a factor can only start now or later")
        same = [f for f in await select(GpuFactor, session, site=self.args.site)
                if f.gpu_type == self.args.gpu_type]
        clash = [f for f in same if f.effective_from >= since]
        if clash:
            raise InvalidInput(f"GPU type {self.args.gpu_type!r} already has a factor from "
                               f"{clash[0].effective_from.isoformat()}; factors only move "
                               "forward in time")
        self.previous = max(same, key=lambda f: f.effective_from).factor if same else None
        self.factor = GpuFactor(site=self.args.site, gpu_type=self.args.gpu_type,
                                factor=self.args.factor, effective_from=since)
        await self.factor.insert(session=session)
        return self.factor

    def describe(self) -> dict[str, Any]:
        f = self.factor
        return {"site": f.site, "gpu_type": f.gpu_type, "factor": f.factor,
                "previous": self.previous, "effective_from": f.effective_from.isoformat()}


class SetUsageRate(Operation):
    """A new version of a partition's price (``*``: every partition without one) from
    ``effective_from`` (default now) on, in the site's currency per CPU-hour and per
    GPU-hour (after GPU factors). Never in the past, like GPU factors: jobs already
    charged keep their cost; a job is priced by the rate in force at its start."""

    op_name = "set_usage_rate"

    class Args(OpArgs):
        site: SiteName
        partition: str = Field(pattern=r"^(\*|[A-Za-z0-9][A-Za-z0-9_.-]{0,63})$")
        cpu_hour: float = Field(ge=0, le=1e9)
        gpu_hour: float = Field(ge=0, le=1e9)
        effective_from: UtcTime | None = None

    async def execute(self, session: AsyncClientSession) -> UsageRate:
        await get_site(self.args.site, session)
        now = utcnow()
        since = (self.args.effective_from or now).replace(microsecond=0)
        if since < now - PAST_TOLERANCE:
            raise InvalidInput("--from is in the past: jobs already charged keep their "
                               "cost, so a rate can only start now or later")
        same = [r for r in await select(UsageRate, session, site=self.args.site)
                if r.partition == self.args.partition]
        clash = [r for r in same if r.effective_from >= since]
        if clash:
            raise InvalidInput(f"partition {self.args.partition!r} already has a rate from "
                               f"{clash[0].effective_from.isoformat()}; rates only move "
                               "forward in time")
        last = max(same, key=lambda r: r.effective_from) if same else None
        self.previous = None if last is None else (last.cpu_hour, last.gpu_hour)
        self.rate = UsageRate(site=self.args.site, partition=self.args.partition,
                              cpu_hour=self.args.cpu_hour, gpu_hour=self.args.gpu_hour,
                              effective_from=since)
        await self.rate.insert(session=session)
        return self.rate

    def describe(self) -> dict[str, Any]:
        r = self.rate
        return {"site": r.site, "partition": r.partition, "cpu_hour": r.cpu_hour,
                "gpu_hour": r.gpu_hour, "previous": self.previous,
                "effective_from": r.effective_from.isoformat()}

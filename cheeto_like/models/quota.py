"""CPU- and GPU-minute quotas per user and per Slurm account (group) at a site.

- A ``Quota`` names exactly one of ``user`` or ``account``; its limits are minutes, None
  meaning unlimited. Subjects without one get the site's ``QuotaDefaults``. What a quota
  does not set (``follows_defaults``: a resource's amount, the period) keeps following
  the defaults as they change; read a quota's limits through ``Quota.resolved``.
- A period (none, monthly, quarterly, yearly: calendar periods in UTC; or explicit dates)
  bounds the jobs that count: a job counts in the period its end falls in.
- ``carry_over``: the unused part of the previous period's quota (never more than one
  period's quota) is added to the current one.
- ``QuotaAdjustment`` is a signed change to *usage* in the period that holds its time,
  as slurm-quota's ``adjust``: negative credits minutes back, positive debits them. The
  used figure never goes below zero.
- A *budget* (issue 28) is money: an amount in the site's currency (``usage.currency``,
  one per site; ``parse_money`` refuses another) that jobs spend through the rate card
  (``models.usage.UsageRate``, priced at the job's start, stored on the record as
  ``cost``). Money used = the ledger's cost + money adjustments in the period; a budget
  sits beside the minute quotas and each is checked on its own (thresholds, the Slurm
  block, the submit-time check).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from .base import BaseDoc, index, unique
from .fields import FreeText, PosixName, SiteName

Period = Literal["none", "monthly", "quarterly", "yearly", "explicit"]
PERIODS: tuple[str, ...] = ("none", "monthly", "quarterly", "yearly", "explicit")
Resource = Literal["cpu", "gpu", "budget"]
MAX_MINUTES = 1e12  # about two million years of one CPU: anything larger is a typo
MAX_MONEY = 1e12  # a budget or a money adjustment past this is a typo
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
FOREVER = datetime(9999, 12, 31, tzinfo=UTC)

_AMOUNT_RE = re.compile(r"^(?P<sign>[+-]?)(?P<n>\d{1,13}(?:\.\d{1,4})?)\s*(?P<unit>m|min|h)?$",
                        re.IGNORECASE)
UNLIMITED_WORDS = ("unlimited", "inf", "none", "-1")


def _minutes(value: float | None) -> float | None:
    if value is not None and not 0 <= value <= MAX_MINUTES:
        raise ValueError(f"{value} minutes is out of range (0 to {MAX_MINUTES:g})")
    return value


Minutes = Annotated[float | None, AfterValidator(_minutes)]


def _money(value: float | None) -> float | None:
    if value is not None and not 0 <= value <= MAX_MONEY:
        raise ValueError(f"{value} is out of range for a budget (0 to {MAX_MONEY:g})")
    return value


Money = Annotated[float | None, AfterValidator(_money)]
_MONEY_RE = re.compile(
    r"^(?P<sign>[+-]?)\s*(?P<n>\d{1,13}(?:\.\d{1,4})?)\s*(?P<cur>[A-Za-z]{0,8})$")


def parse_money(text: str, currency: str, *, signed: bool = False) -> float | None:
    """``500USD``, ``500 USD`` or ``500`` (the site's ``currency``), ``unlimited`` ->
    the amount or None. With ``signed`` (adjustments) ``+``/``-`` is allowed and unlimited
    is not. A budget in another currency is refused: a site charges in one currency."""
    value = text.strip()
    if not signed and value.lower() in UNLIMITED_WORDS:
        return None
    m = _MONEY_RE.match(value)
    if m is None or (m["sign"] and not signed):
        hint = f"-50{currency}, +20{currency}" if signed else f"500{currency} or unlimited"
        raise ValueError(f"cannot read amount {text!r} (examples: {hint})")
    if m["cur"] and m["cur"].upper() != currency.upper():
        raise ValueError(f"{text!r} is in {m['cur'].upper()}, but this site charges in "
                         f"{currency.upper()} (usage.currency)")
    amount = float(m["n"])
    if amount > MAX_MONEY:
        raise ValueError(f"amount {text!r} is out of range")
    return -amount if m["sign"] == "-" else amount


def parse_amount(text: str, *, signed: bool = False) -> float | None:
    """``600m``/``600`` (minutes), ``10h`` (hours), ``unlimited`` -> minutes or None.
    With ``signed`` (adjustments) a leading ``+``/``-`` is allowed and unlimited is not."""
    value = text.strip().lower()
    if not signed and value in UNLIMITED_WORDS:
        return None
    m = _AMOUNT_RE.match(value)
    if m is None or (m["sign"] and not signed):
        hint = "+10h, -90m" if signed else "600m, 10h or unlimited"
        raise ValueError(f"cannot read amount {text!r} (examples: {hint})")
    amount = float(m["n"]) * (60 if (m["unit"] or "m").lower() == "h" else 1)
    if amount > MAX_MINUTES:
        raise ValueError(f"amount {text!r} is out of range")
    return -amount if m["sign"] == "-" else amount


def period_window(period: str, now: datetime, start: datetime | None = None,
                  end: datetime | None = None) -> tuple[datetime, datetime]:
    """[start, end) of the period that holds ``now`` (UTC calendar periods)."""
    now = now.astimezone(UTC)
    if period == "none":
        return EPOCH, FOREVER
    if period == "explicit":
        if start is None or end is None:
            raise ValueError("an explicit period needs a start and an end")
        return start, end
    months = {"monthly": 1, "quarterly": 3, "yearly": 12}[period]
    first = (now.month - 1) // months * months + 1
    begin = datetime(now.year, first, 1, tzinfo=UTC)
    return begin, _add_months(begin, months)


def previous_window(period: str, window: tuple[datetime, datetime],
                    ) -> tuple[datetime, datetime] | None:
    """The period before ``window`` (None for none/explicit: nothing carries over)."""
    if period not in ("monthly", "quarterly", "yearly"):
        return None
    months = {"monthly": 1, "quarterly": 3, "yearly": 12}[period]
    return _add_months(window[0], -months), window[0]


def _add_months(when: datetime, months: int) -> datetime:
    index_ = when.year * 12 + when.month - 1 + months
    return when.replace(year=index_ // 12, month=index_ % 12 + 1, day=1)


class _PeriodFields(BaseDoc):
    period: Period = "none"
    period_start: datetime | None = None
    period_end: datetime | None = None
    carry_over: bool = False

    @model_validator(mode="after")
    def _explicit_dates(self) -> _PeriodFields:
        if self.period == "explicit":
            if self.period_start is None or self.period_end is None:
                raise ValueError("an explicit period needs --start and --end")
            if self.period_end <= self.period_start:
                raise ValueError("the period must end after it starts")
        elif self.period_start is not None or self.period_end is not None:
            raise ValueError("--start/--end only go with --period explicit")
        if self.carry_over and self.period in ("none", "explicit"):
            raise ValueError(f"carry-over needs a repeating period, not {self.period!r}")
        return self

    def window(self, now: datetime) -> tuple[datetime, datetime]:
        return period_window(self.period, now, self.period_start, self.period_end)


Follower = Literal["cpu", "gpu", "budget", "period"]
FOLLOWERS: tuple[Follower, ...] = ("cpu", "gpu", "budget", "period")
PERIOD_KEYS = ("period", "period_start", "period_end", "carry_over")
NO_PERIOD: dict[str, object] = {"period": "none", "period_start": None, "period_end": None,
                                "carry_over": False}


class Quota(_PeriodFields):
    """The quota of one user or one account at a site (unique per site and subject; a
    rename rewrites ``user``/``account``, so there is no derived key to go stale).

    ``follows_defaults`` lists what the admin never set on this quota and so follows the
    site's ``QuotaDefaults`` for the quota's kind at every read, never a copy taken when
    the quota was made: ``cpu``/``gpu`` (that amount) and ``period`` (period, dates and
    carry-over, as one). A new quota follows everything it was not given; giving a value
    later (``unlimited`` too) pins it. The period follows as long as no period setting
    was given, whatever the amounts: a quota that only sets GPU minutes has the site's
    CPU default *over the site's period*, so a site moving from monthly to quarterly
    with a tripled default gives its CPU three times as much over three times as long,
    never a quarterly amount per month. The stored values of what follows are
    placeholders (None, period none): read limits through ``resolved``. Documents from
    before the field have it empty: everything pinned, as they read then."""

    site: SiteName
    user: PosixName | None = None
    account: PosixName | None = None
    cpu_minutes: Minutes = None
    gpu_minutes: Minutes = None
    # money in the site's currency (None: no budget); documents from before it have none
    budget: Money = None
    follows_defaults: list[Follower] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_subject(self) -> Quota:
        if (self.user is None) == (self.account is None):
            raise ValueError("a quota names exactly one of a user or an account")
        return self

    @property
    def kind(self) -> Literal["user", "account"]:
        return "user" if self.user is not None else "account"

    def follows(self, what: str) -> bool:
        """``what`` (cpu, gpu or period) follows the site's defaults."""
        return what in self.follows_defaults

    def resolved(self, defaults: QuotaDefaults | None) -> Quota:
        """This quota with what it follows read from the site's ``defaults`` (none: that
        amount is unlimited, the period ``none``): the limits in force. An unsaved copy;
        ``follows_defaults`` is kept so a reader can say where a value came from."""
        if not self.follows_defaults:
            return self
        values: dict[str, object] = {}
        for resource in ("cpu", "gpu"):
            if self.follows(resource):
                values[f"{resource}_minutes"] = getattr(
                    defaults, f"{self.kind}_{resource}_minutes", None)
        if self.follows("budget"):
            values["budget"] = getattr(defaults, f"{self.kind}_budget", None)
        if self.follows("period"):
            values.update({k: getattr(defaults, k) for k in PERIOD_KEYS}
                          if defaults is not None else NO_PERIOD)
        return self.model_copy(update=values)

    class Settings(BaseDoc.Settings):
        name = "quotas"
        indexes = [unique("site", "user", "account"), index("site")]


class QuotaDefaults(_PeriodFields):
    """A site's quotas for users and accounts that have none of their own."""

    site: SiteName
    user_cpu_minutes: Minutes = None
    user_gpu_minutes: Minutes = None
    account_cpu_minutes: Minutes = None
    account_gpu_minutes: Minutes = None
    user_budget: Money = None
    account_budget: Money = None

    class Settings(BaseDoc.Settings):
        name = "quota_defaults"
        indexes = [unique("site")]


class QuotaAdjustment(BaseDoc):
    """A signed change to a user's or account's usage (minus: a credit), with why."""

    site: SiteName
    user: PosixName | None = None
    account: PosixName | None = None
    cpu_minutes: float = Field(default=0.0, ge=-MAX_MINUTES, le=MAX_MINUTES)
    gpu_minutes: float = Field(default=0.0, ge=-MAX_MINUTES, le=MAX_MINUTES)
    money: float = Field(default=0.0, ge=-MAX_MONEY, le=MAX_MONEY)  # the site's currency
    reason: FreeText = Field(min_length=1, max_length=500)
    at: datetime
    at_epoch: int

    @model_validator(mode="after")
    def _one_subject(self) -> QuotaAdjustment:
        if (self.user is None) == (self.account is None):
            raise ValueError("an adjustment names exactly one of a user or an account")
        return self

    class Settings(BaseDoc.Settings):
        name = "quota_adjustments"
        indexes = [index("site"), index("user"), index("account")]



class QuotaNotice(BaseDoc):
    """One threshold notice: ``kind`` user or account ``subject`` passed ``threshold`` %
    of its ``resource`` quota in the period that starts at ``period_start``. ``key`` is
    unique, so each threshold is noticed once per period."""

    key: str
    site: SiteName
    kind: Literal["user", "account"]
    subject: str
    resource: Resource
    threshold: int = Field(ge=1, le=1000)
    period_start: datetime
    # the end of that period: what retention counts from (``retention.quota_notices_days``
    # after it, a TTL index deletes the notice), so a notice outlives its period and is
    # never sent twice in it; None on rows from before it (kept)
    period_end: datetime | None = None
    percent: float
    to: list[str] = Field(default_factory=list)
    # when it was sent (epoch seconds): the operator digest lists the notices sent since
    # the last digest, matched on this integer (the embedded store compares datetimes
    # wrongly in filters); 0 on rows from before it
    noticed_epoch: int = 0

    class Settings(BaseDoc.Settings):
        name = "quota_notices"
        indexes = [unique("key"), index("site"), index("noticed_epoch")]


def notice_key(site: str, kind: str, subject: str, resource: str, threshold: int,
               period_start: datetime) -> str:
    return (f"{site}/{kind}/{subject}/{resource}/{threshold}/"
            f"{int(period_start.timestamp())}")

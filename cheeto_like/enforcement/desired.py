"""The quota table's rows from the store: what the plugin needs to judge a submission.

One call of ``queries.quota.quota_status`` for the whole site (a constant number of
queries: quotas, defaults, adjustments, the running totals of each month of each period
window, kept by the same charge that writes the ledger: issue 31), plus
the site's GPU factors and rates in force (issue 28: money used and budgets ride on the
same rows, the rates price a request in the plugin). Everyone with a quota of their own,
usage in their period, or an adjustment gets a row; anyone else gets the defaults with
nothing used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from ..models.quota import QuotaAdjustment
from ..queries.quota import quota_status, site_quotas
from ..queries.usage import factor_table, rate_table
from .table import SubjectRow, Table


@dataclass(frozen=True)
class Built:
    table: Table
    # when the table goes stale by itself: the soonest end of a period in force or
    # start of a new GPU factor (None: never); the agent rebuilds then
    next_change: datetime | None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


async def build_table(site: str, now: datetime, *,
                      seed: Mapping[str, tuple[float, float]] | None = None,
                      currency: str = "") -> Built:
    """``seed``: the config's rate card of the site (``queries.usage.config_seed``)."""
    adjusted = await QuotaAdjustment.get_pymongo_collection().distinct(
        "user", {"site": site, "user": {"$ne": None}})
    adjusted_accounts = await QuotaAdjustment.get_pymongo_collection().distinct(
        "account", {"site": site, "account": {"$ne": None}})
    also = [("user", u) for u in adjusted] + [("account", a) for a in adjusted_accounts]
    statuses = await quota_status(site, now, also=also)
    subjects = tuple(SubjectRow(s.kind, s.name, _round(s.cpu.quota), _round(s.gpu.quota),
                                round(s.cpu.used, 4), round(s.gpu.used, 4),
                                _round(s.budget.quota), round(s.budget.used, 4))
                     for s in statuses)
    quotas, defaults_doc = await site_quotas(site)
    defaults = tuple(
        (kind, _round(getattr(defaults_doc, f"{kind}_cpu_minutes", None)),
         _round(getattr(defaults_doc, f"{kind}_gpu_minutes", None)))
        for kind in ("user", "account"))
    factors_table = await factor_table(site)
    factors = tuple(sorted((kind, factors_table.factor(kind, now))
                           for kind, versions in factors_table.versions.items()
                           if any(since <= now for since, _ in versions)))
    budgets = tuple((kind, _round(getattr(defaults_doc, f"{kind}_budget", None)))
                    for kind in ("user", "account"))
    rates_table = await rate_table(site, seed)
    rates = tuple(sorted((part, cpu, gpu)
                         for part, (cpu, gpu) in rates_table.in_force(now).items()))
    ends = [s.end for s in statuses]
    if defaults_doc is not None:
        ends.append(defaults_doc.window(now)[1])
    for quota in quotas:
        ends.append(quota.window(now)[1])
    for versions in factors_table.versions.values():
        ends.extend(since for since, _ in versions if since > now)
    for rate_versions in rates_table.versions.values():
        ends.extend(since for since, _, _ in rate_versions if since > now)
    future = [end for end in ends if end > now]
    return Built(Table(site, subjects, defaults, factors, rates, budgets, currency),
                 min(future) if future else None)

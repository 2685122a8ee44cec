"""Reads of the running quota totals (``models.quota_totals``): used per subject and
period window without touching the ledger.

A window is split into whole UTC months (read from the totals: one indexed read per
month for a whole site, or one per subject) and, for explicit periods that start or end
inside a month, the partial months at its ends (read from the ledger by
``queries.usage.used_by``, bounded by those days). Period ``none`` reads the ``all``
bucket. So a monthly, quarterly or yearly status costs O(subjects x months), whatever
the number of jobs.
"""

from __future__ import annotations

from datetime import UTC, datetime

from ..models.base import iter_rows
from ..models.quota import EPOCH, FOREVER
from ..models.quota_totals import (
    ALL,
    MINUTE_UNITS,
    MONEY_UNITS,
    QuotaTotal,
    QuotaTotalsMark,
    subject_name,
)
from .usage import used_by

Window = tuple[datetime, datetime]
Used = tuple[float, float, float]  # CPU minutes, GPU minutes, money
_FIELDS = ("site", "kind", "user", "account", "bucket", "cpu", "gpu", "money", "jobs")


async def totals_built(site: str) -> bool:
    """The site's totals were built from its ledger (``rebuild-totals`` ran once): a
    store from before them reads the ledger until then."""
    found = await QuotaTotalsMark.get_pymongo_collection().find_one({"site": site},
                                                                    {"_id": 1})
    return found is not None


def _month_start(when: datetime) -> datetime:
    return datetime(when.year, when.month, 1, tzinfo=UTC)


def _next_month(when: datetime) -> datetime:
    return datetime(when.year + when.month // 12, when.month % 12 + 1, 1, tzinfo=UTC)


def split_window(window: Window) -> tuple[list[str], list[Window]]:
    """(buckets, ledger ranges) that together cover [start, end) exactly."""
    start, end = (w.astimezone(UTC) for w in window)
    if start <= EPOCH and end >= FOREVER:
        return [ALL], []
    first = start if start == _month_start(start) else _next_month(start)
    last = _month_start(end)
    if first >= last:
        return [], [(start, end)]
    buckets = []
    month = first
    while month < last:
        buckets.append(f"{month:%Y-%m}")
        month = _next_month(month)
    edges = [r for r in ((start, first), (last, end)) if r[0] < r[1]]
    return buckets, edges


def _plain(sums: list[int]) -> Used:
    return sums[0] / MINUTE_UNITS, sums[1] / MINUTE_UNITS, sums[2] / MONEY_UNITS


class TotalsReader:
    """The used figures of a site from its totals, each bucket read once."""

    def __init__(self, site: str) -> None:
        self.site = site
        self.buckets: dict[str, dict[tuple[str, str], list[int]]] = {}
        self.subjects: dict[tuple[str, str], dict[str, list[int]]] = {}
        self.queries = 0

    async def _bucket(self, bucket: str) -> dict[tuple[str, str], list[int]]:
        if bucket not in self.buckets:
            self.queries += 1
            found: dict[tuple[str, str], list[int]] = {}
            async for doc in iter_rows(QuotaTotal, {"site_bucket": f"{self.site}/{bucket}"},
                                       *_FIELDS):
                _add(found.setdefault((str(doc["kind"]), subject_name(doc)), [0] * 4), doc)
            self.buckets[bucket] = found
        return self.buckets[bucket]

    async def _subject(self, kind: str, name: str) -> dict[str, list[int]]:
        if (kind, name) not in self.subjects:
            self.queries += 1
            found: dict[str, list[int]] = {}
            async for doc in iter_rows(QuotaTotal, {kind: name}, *_FIELDS):
                if doc.get("site") == self.site and doc.get("kind") == kind:
                    _add(found.setdefault(str(doc["bucket"]), [0] * 4), doc)
            self.subjects[(kind, name)] = found
        return self.subjects[(kind, name)]

    async def used(self, kind: str, window: Window,
                   name: str | None = None) -> dict[str, Used]:
        """name -> used in ``window`` for every ``kind`` subject with a record in it
        (``name``: that one only)."""
        buckets, edges = split_window(window)
        sums: dict[str, list[int]] = {}
        for bucket in buckets:
            if name is None or bucket in self.buckets:
                for (k, who), values in (await self._bucket(bucket)).items():
                    if k == kind and (name is None or who == name):
                        _merge(sums.setdefault(who, [0] * 4), values)
            else:
                values = (await self._subject(kind, name)).get(bucket)
                if values is not None:
                    _merge(sums.setdefault(name, [0] * 4), values)
        out = {who: _plain(values) for who, values in sums.items() if values[3] > 0}
        for lo, hi in edges:
            self.queries += 1
            for who, (cpu, gpu, money) in (await used_by(
                    self.site, lo, hi, kind, None if name is None else [name])).items():
                old = out.get(who, (0.0, 0.0, 0.0))
                out[who] = (old[0] + cpu, old[1] + gpu, old[2] + money)
        return out

    async def has_usage(self, kind: str, name: str) -> bool:
        """The subject has a record at the site (any bucket)."""
        return any(values[3] > 0 for values in (await self._subject(kind, name)).values())


def _add(slot: list[int], doc: dict[str, object]) -> None:
    for i, what in enumerate(("cpu", "gpu", "money", "jobs")):
        slot[i] += int(doc.get(what) or 0)  # type: ignore[call-overload]


def _merge(slot: list[int], values: list[int]) -> None:
    for i, value in enumerate(values):
        slot[i] += value

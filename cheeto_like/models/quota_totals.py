"""Running usage totals per (site, subject, month): what quota status reads instead of
summing the ledger (issue 31).

Why: quota status, the Slurm sync's blocks, the submit check's table, ``ng quota show``
and ``ng usage summary`` summed every ledger record of a period; at a million records
that was 10 s. A ``QuotaTotal`` holds one subject's sums over one *bucket*: a UTC
calendar month (``YYYY-MM``, the month the job's end falls in, as a job is charged in
the period its end falls in) or ``all`` (every record: period ``none``). Monthly,
quarterly and yearly periods are whole months, so a status reads 1, 3 or 12 buckets per
subject; an explicit period reads its whole months here and its partial first and last
month from the ledger (``queries.quota_totals``).

Each ledger write changes the totals in the same transaction by the *difference* it
makes (``operations.quota_totals.Deltas``): an insert adds the record, a replace adds
new - old (a re-collect of an unchanged record writes nothing at all), a prune
subtracts. So a total never counts a job twice, and ``cheeto ng quota rebuild-totals``
recomputes them from the ledger when something went around that path.

Sums are integers in fixed units (``MINUTE_UNITS`` per minute, ``MONEY_UNITS`` per unit
of money: the ledger's own rounding, 4 and 6 decimals), so any order of ``$inc`` gives
exactly the sum a rebuild gives (floats would drift by the order of additions).

Why one document per subject and month, and the ``_id`` made from them: two collects of
different sites, or of different people, never write the same document (no hot
document, CLAUDE.md), and the charge path updates by ``_id`` (the embedded store scans
for any other update filter). A rename rewrites ``user``/``account`` here as everywhere
(``models/references.py``); the ``_id`` keeps the old name, so readers group by the
field, never by the ``_id``, and writers match the name beside the ``_id``
(``operations.quota_totals``).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from pydantic import Field

from .base import BaseDoc, index, unique
from .fields import SiteName

MINUTE_UNITS = 10_000  # a record's minutes are rounded to 4 decimals
MONEY_UNITS = 1_000_000  # a record's cost is rounded to 6 decimals
ALL = "all"  # the bucket of every record (period none)
KINDS = ("user", "account")
_NAMESPACE = uuid.UUID("0c3f2d6e-31a1-5b0e-9f4e-7a1d0e2c5b31")


class QuotaTotal(BaseDoc):
    """One subject's usage at a site over one bucket (a month, or ``all``)."""

    site: SiteName
    kind: str  # user | account
    user: str | None = None
    account: str | None = None
    bucket: str  # YYYY-MM (UTC, the month of the jobs' ends) or "all"
    site_bucket: str  # "<site>/<bucket>": the one indexed field a site-wide read matches
    cpu: int = 0  # CPU minutes x MINUTE_UNITS
    gpu: int = 0  # GPU minutes (GPU factors applied at collect) x MINUTE_UNITS
    money: int = 0  # the records' cost x MONEY_UNITS (unpriced records count 0)
    jobs: int = 0

    class Settings(BaseDoc.Settings):
        name = "quota_totals"
        indexes = [index("site_bucket"), index("user"), index("account"), index("site")]


class QuotaTotalsMark(BaseDoc):
    """A site whose totals were built from its ledger (``rebuild-totals``): until then
    (a store from before issue 31) quota status sums the ledger as it used to."""

    site: SiteName
    built_at: datetime
    records: int = Field(default=0, ge=0)

    class Settings(BaseDoc.Settings):
        name = "quota_totals_marks"
        indexes = [unique("site")]


def subject_name(doc: dict[str, object]) -> str:
    """The subject a raw total row belongs to (its ``user`` or ``account`` field)."""
    return str(doc.get(str(doc.get("kind"))) or "")


def total_id(site: str, kind: str, name: str, bucket: str) -> str:
    """The ``_id`` of a subject's bucket: stable, so the charge path updates by it."""
    return uuid.uuid5(_NAMESPACE, f"{site}\x1f{kind}\x1f{name}\x1f{bucket}").hex


def month_of(epoch: int) -> str:
    """The bucket of a job that ended at ``epoch`` (seconds, UTC)."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m")


def minute_units(value: float | None) -> int:
    return round((value or 0.0) * MINUTE_UNITS)


def money_units(value: float | None) -> int:
    return round((value or 0.0) * MONEY_UNITS)

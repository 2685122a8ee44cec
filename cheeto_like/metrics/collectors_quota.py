"""The submit-time quota check's own figures, read from its files when Prometheus
scrapes a site worker: ``cheeto_quota_submit_refusals_total{site,quota}`` and
``cheeto_quota_table_age_seconds{site}``.

Why from the files: the check is slurmctld's Lua plugin, which cannot serve or push
anything (it runs under slurmctld's job lock and only reads and writes SQLite files). It
counts each refusal in ``reservations.db``'s ``refusals(quota, n)`` table, in the write
it already makes there; the worker beside it reads that table here, read-only, one
short query per site. The counts live as long as the file (an admin who deletes it
resets them, which Prometheus reads as a counter reset).

The table's age is now minus ``quota.db``'s ``written_at`` (what the plugin itself
judges staleness by), else the file's modification time; a missing table yields no
sample (the quota agent has not written one yet; an alert can name the absence).

Label values are bounded: ``quota`` is one of ``QUOTAS`` (the plugin writes no other);
anything else a damaged file holds is folded into ``other``.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# cpu, gpu, budget: over a quota; no_time_limit: unbounded request at a site with a
# quota; stale: refused because the table was missing or old (on_stale fail_closed)
QUOTAS = ("cpu", "gpu", "budget", "no_time_limit", "stale")
BUSY_SECONDS = 1.0


@dataclass(frozen=True)
class SiteFiles:
    site: str
    table: Path
    reservations: Path


def refusals(path: Path) -> dict[str, int]:
    """The refusal counts in a ``reservations.db`` (every known kind, 0 when absent)."""
    found = dict.fromkeys(QUOTAS, 0)
    if not path.is_file():
        return found
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=BUSY_SECONDS)) as db:
            db.execute("PRAGMA query_only=1")
            rows = db.execute("SELECT quota, n FROM refusals").fetchall()
    except sqlite3.OperationalError:  # a file from before the count (no table yet)
        return found
    for quota, n in rows:
        key = quota if quota in found else "other"
        found[key] = found.get(key, 0) + int(n or 0)
    return found


def table_age(path: Path, now: float | None = None) -> float | None:
    """Seconds since the table was written (None: no table)."""
    from ..enforcement.table import read_meta

    if not path.is_file():
        return None
    now = time.time() if now is None else now
    written: float | None = None
    with contextlib.suppress(sqlite3.Error, ValueError):
        written = float(read_meta(path).get("written_at", ""))
    if written is None:
        try:
            written = path.stat().st_mtime
        except OSError:
            return None
    return max(now - written, 0.0)


class QuotaFiles:
    """A collector over the enforcement files of some sites."""

    def __init__(self, sites: Iterable[SiteFiles]) -> None:
        self.sites = list(sites)

    def collect(self) -> Iterator[Any]:
        from .families import collected

        counts: list[tuple[dict[str, str], float]] = []
        ages: list[tuple[dict[str, str], float]] = []
        for files in self.sites:
            try:
                for quota, n in refusals(files.reservations).items():
                    counts.append(({"site": files.site, "quota": quota}, n))
                age = table_age(files.table)
                if age is not None:
                    ages.append(({"site": files.site}, age))
            except Exception:  # one unreadable site must not blank the others
                log.exception("quota metrics of %s could not be read", files.site)
        yield collected("cheeto_quota_submit_refusals_total", counts)
        yield collected("cheeto_quota_table_age_seconds", ages)


def site_files(config: Any, sites: Iterable[str]) -> list[SiteFiles]:
    """The files of each of ``sites`` that checks quotas at submit
    (``slurm.enforcement.sites``); the others have none."""
    from ..enforcement.layout import layout

    settings = config.slurm.enforcement
    found = []
    for site in sites:
        if site in settings.sites:
            # the state files do not depend on slurm.conf's place (only the plugin does)
            where = layout(settings, site, Path("/"))
            found.append(SiteFiles(site, where.table, where.reservations))
    return found


def install(config: Any, sites: Iterable[str]) -> bool:
    """Expose the quota figures of ``sites`` (a site worker's own) on the site worker's
    metrics port; False when none of them checks quotas at submit."""
    from . import add_collector

    files = site_files(config, sites)
    if not files:
        return False
    add_collector("site_worker", QuotaFiles(files))
    return True

"""The beat schedule, built from the ``daemon.tasks`` blocks.

- ``schedule: 600`` is an interval in seconds; the entry's messages expire after one
  interval, so a tick that waited that long (a busy or absent worker) is dropped rather
  than piled up behind the next one.
- ``schedule: "*/15 * * * *"`` is a 5-field crontab (minute hour day-of-month month
  day-of-week) in ``daemon.timezone``; crontab entries never expire.
- No block, a disabled block or no ``schedule``: no entry (``BeatPlan.notes`` says why).
- Per-site tasks get one entry per site (``<entry>-<site>``, e.g. ``slurm-sync-farm``),
  from the task's ``sites`` or ``daemon.sites``; a scheduled task with no site at all is
  an error. ``slurm_sync`` entries carry the queue ``slurm.<site>``.

Any problem is an ``InvalidInput`` naming the key, which ``cheeto daemon beat`` prints
as one line before exiting 2.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from celery.schedules import crontab

from ..config import CRON_FIELDS, Config, TaskBlock, check_schedule
from ..errors import InvalidInput
from .config import TASKS, TaskDisabled, daemon_config, task_block, task_sites


def parse_schedule(value: int | float | str) -> timedelta | crontab:
    """Seconds -> ``timedelta``; a 5-field crontab string -> ``crontab``; else ValueError."""
    checked = check_schedule(value)
    if checked is None:
        raise ValueError("no schedule")
    if isinstance(checked, int | float):
        return timedelta(seconds=checked)
    fields = checked.split()
    for name, text in zip(CRON_FIELDS, fields, strict=True):
        # parse each field alone so the error can say which one is wrong
        probe = dict.fromkeys(("minute", "hour", "day_of_month", "month_of_year",
                               "day_of_week"), "*")
        probe[_CRONTAB_ARGS[name]] = text
        try:
            crontab(**probe)
        except Exception as exc:  # celery raises ValueError or its ParseException
            raise ValueError(f"{checked!r}: bad {name} field {text!r} ({exc})") from None
    minute, hour, day_of_month, month_of_year, day_of_week = fields
    return crontab(minute=minute, hour=hour, day_of_month=day_of_month,
                   month_of_year=month_of_year, day_of_week=day_of_week)


_CRONTAB_ARGS = {"minute": "minute", "hour": "hour", "day-of-month": "day_of_month",
                 "month": "month_of_year", "day-of-week": "day_of_week"}


def entry_options(schedule: timedelta | crontab, queue: str) -> dict[str, Any]:
    options: dict[str, Any] = {"queue": queue}
    if isinstance(schedule, timedelta):
        options["expires"] = schedule.total_seconds()
    return options


@dataclass
class BeatPlan:
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # why a task has no entry


def build_beat_schedule(config: Config) -> BeatPlan:
    """Celery's ``beat_schedule`` for this config; ``InvalidInput`` on a bad schedule."""
    daemon_config(config)
    plan = BeatPlan()
    for spec in TASKS.values():
        try:
            block: TaskBlock = task_block(config, spec)
        except TaskDisabled as exc:
            plan.notes.append(f"{exc.message}; not scheduled")
            continue
        if block.schedule is None:
            plan.notes.append(f"task {spec.name} has no schedule; it runs only when enqueued")
            continue
        try:
            schedule = parse_schedule(block.schedule)
        except ValueError as exc:
            raise InvalidInput(f"daemon.tasks.{spec.block}.schedule: {exc}") from None
        if not spec.per_site:
            plan.entries[spec.entry] = {"task": spec.celery_name, "schedule": schedule,
                                        "args": (), "options": entry_options(schedule,
                                                                             spec.queue(None))}
            continue
        try:
            sites = task_sites(config, spec, block)
        except InvalidInput as exc:
            raise InvalidInput(f"{exc.message} (it has a schedule)") from None
        for site in sites:
            plan.entries[f"{spec.entry}-{site}"] = {
                "task": spec.celery_name, "schedule": schedule, "args": (site,),
                "options": entry_options(schedule, spec.queue(site))}
    return plan

"""The last run of a reconciler at a site: one answer for every place that shows it.

``cheeto daemon status`` and ``cheeto ng slurm why`` both call ``last_sync_run``; before,
one took the newest run of any kind and the other the newest *applied* run, so a dry run
after an apply made them name different runs. "The last sync" is the newest ``SyncRun``
of the (target, site), dry run or not, by ``started_at``; its ``apply`` flag says which.

A ``running`` apply keeps its commands' outcomes in ``SyncStep`` documents, not in its
``items`` (rewriting the whole list before each command was quadratic: sync/runs.py), so
whatever shows a run's items reads them through ``live_items``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..models import SyncRun, SyncStep
from ..models.sync import SyncItem
from .site import Session


async def last_sync_run(target: str, site: str, session: Session = None) -> SyncRun | None:
    """The newest SyncRun of ``target`` (slurm, ldap, puppet, …) at ``site``, or None."""
    runs = await SyncRun.find({"target": target, "site": site}, session=session).sort(
        -SyncRun.started_at).limit(1).to_list()
    return runs[0] if runs else None


def overlay(items: Sequence[SyncItem], steps: Iterable[Mapping[str, Any]]) -> list[SyncItem]:
    """The run's planned ``items`` with the outcome and detail of each of its ``SyncStep``
    documents (raw) put on the item at the step's index; ``items`` is left as it was."""
    merged = list(items)
    for step in steps:
        index = step.get("index")
        if isinstance(index, int) and 0 <= index < len(merged):
            merged[index] = merged[index].model_copy(
                update={"outcome": step["outcome"], "detail": step.get("detail", "")})
    return merged


async def run_steps(run_id: str, session: Session = None) -> list[dict[str, Any]]:
    """A run's step documents, raw: one indexed single-field query."""
    return [doc async for doc in SyncStep.get_pymongo_collection().find(
        {"run": run_id}, session=session)]


async def live_items(run: SyncRun, session: Session = None) -> list[SyncItem]:
    """The items of ``run`` as they stand: a ``running`` run's outcomes are in its step
    documents until it ends (one more query); any other run's are in ``run.items``."""
    if run.status != "running":
        return run.items
    return overlay(run.items, await run_steps(run.id, session))

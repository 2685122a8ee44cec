"""The last run of a reconciler at a site: one answer for every place that shows it.

``cheeto daemon status`` and ``cheeto ng slurm why`` both call ``last_sync_run``; before,
one took the newest run of any kind and the other the newest *applied* run, so a dry run
after an apply made them name different runs. "The last sync" is the newest ``SyncRun``
of the (target, site), dry run or not, by ``started_at``; its ``apply`` flag says which.

A run's items are ``SyncRunItem`` documents (``sync_items``), not a list on the run (a
150k-association apply made a 15-18 MB list, past the 16 MiB document limit), and a
``running`` apply keeps its commands' outcomes in ``SyncStep`` documents until it ends
(rewriting the whole list before each command was quadratic: sync/runs.py), so whatever
shows a run's items reads them through ``live_items`` (or ``items_of_runs`` for a page).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..models import SyncRun, SyncRunItem, SyncStep
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


ITEM_FIELDS = ("batch", "command", "targets", "outcome", "detail", "removals")


def _item(doc: Mapping[str, Any]) -> SyncItem:
    return SyncItem.model_validate({k: doc[k] for k in ITEM_FIELDS if k in doc})


async def run_items(run_id: str, session: Session = None) -> list[SyncItem]:
    """The stored items of a run in plan order: one indexed query on ``sync_items``
    (sorted here: the embedded store scans for a filter plus a sort). A run from before
    items had their own collection keeps them on its document, read raw."""
    docs = [doc async for doc in SyncRunItem.get_pymongo_collection().find(
        {"run": run_id}, {"_id": 0, "run": 0, "started_at": 0}, session=session)]
    if not docs:
        return (await _legacy_items([run_id], session)).get(run_id, [])
    docs.sort(key=lambda d: int(d["index"]))
    return [_item(d) for d in docs]


async def _legacy_items(run_ids: Sequence[str],
                        session: Session = None) -> dict[str, list[SyncItem]]:
    """``items`` kept on run documents written before ``sync_items`` (none on new runs)."""
    if not run_ids:
        return {}
    out: dict[str, list[SyncItem]] = {}
    async for doc in SyncRun.get_pymongo_collection().find(
            {"_id": {"$in": list(run_ids)}}, {"items": 1}, session=session):
        if doc.get("items"):
            out[str(doc["_id"])] = [_item(i) for i in doc["items"]]
    return out


async def live_items(run: SyncRun, session: Session = None) -> list[SyncItem]:
    """The items of ``run`` as they stand: its ``sync_items`` documents, with a
    ``running`` run's step outcomes put on them (one more query)."""
    items = await run_items(run.id, session)
    if run.status != "running":
        return items
    return overlay(items, await run_steps(run.id, session))


async def items_of_runs(runs: Sequence[SyncRun],
                        session: Session = None) -> dict[str, list[SyncItem]]:
    """``live_items`` of several runs in a fixed number of queries (one ``$in`` on
    ``sync_items``, one on ``sync_steps`` if some run is ``running``, one for runs from
    before ``sync_items``), for pages that list runs with their items."""
    ids = [r.id for r in runs]
    found: dict[str, list[tuple[int, SyncItem]]] = {i: [] for i in ids}
    if ids:
        async for doc in SyncRunItem.get_pymongo_collection().find(
                {"run": {"$in": ids}}, {"_id": 0, "started_at": 0}, session=session):
            if doc["run"] in found:
                found[doc["run"]].append((int(doc["index"]), _item(doc)))
    out = {i: [item for _, item in sorted(pairs, key=lambda p: p[0])]
           for i, pairs in found.items()}
    out |= await _legacy_items([i for i in ids if not out[i]], session)
    running = [r.id for r in runs if r.status == "running"]
    if running:
        steps: dict[str, list[dict[str, Any]]] = {}
        async for step in SyncStep.get_pymongo_collection().find(
                {"run": {"$in": running}}, session=session):
            steps.setdefault(step["run"], []).append(step)
        for run_id in running:
            out[run_id] = overlay(out[run_id], steps.get(run_id, []))
    return out


@dataclass(frozen=True)
class ShownRun:
    """A run with its items, for templates that show both (``r.items``, ``r.status``)."""

    run: SyncRun
    items: list[SyncItem]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.run, name)


@dataclass(frozen=True)
class RunSummary:
    """What a list of runs shows of one run's items: how many there are per outcome, and
    the first ``shown`` of them (a dry run of a whole site plans tens of thousands)."""

    outcomes: dict[str, int]
    first: list[SyncItem]
    total: int


DRIFT_OUTCOMES = ("planned", "pending", "failed")


async def run_summaries(runs: Sequence[Any], shown: int = 200,
                        session: Session = None) -> dict[str, RunSummary]:
    """``RunSummary`` of each of ``runs`` (objects with ``id`` and ``status``) in a fixed
    number of queries, reading no more than ``shown`` items per run: the outcomes of the
    ended runs' items grouped in the store, their first items in one ``$in`` query; a
    ``running`` run (steps to overlay) and a run from before ``sync_items`` are read
    whole (``live_items``), as few as they are."""
    from ..models.base import grouped

    ended = [str(r.id) for r in runs if r.status != "running"]
    outcomes = await grouped(SyncRunItem, {"run": {"$in": ended}}, "run", "outcome",
                             session=session) if ended else {}
    first: dict[str, list[tuple[int, SyncItem]]] = {i: [] for i in ended}
    if ended:
        async for doc in SyncRunItem.get_pymongo_collection().find(
                {"run": {"$in": ended}, "index": {"$lt": shown}},
                {"_id": 0, "started_at": 0}, session=session):
            first.setdefault(doc["run"], []).append((int(doc["index"]), _item(doc)))
    out: dict[str, RunSummary] = {}
    whole: list[Any] = []
    for run in runs:
        run_id = str(run.id)
        if run_id not in outcomes:  # running, from before sync_items, or without items
            whole.append(run)
            continue
        tally: dict[str, int] = {}
        for outcome in outcomes[run_id]:
            tally[outcome] = tally.get(outcome, 0) + 1
        items = [item for _, item in sorted(first[run_id], key=lambda p: p[0])]
        out[run_id] = RunSummary(dict(sorted(tally.items())), items,
                                 len(outcomes[run_id]))
    if whole:
        every = await items_of_runs(whole, session)
        for run in whole:
            items = every[str(run.id)]
            tally = {}
            for item in items:
                tally[item.outcome] = tally.get(item.outcome, 0) + 1
            out[str(run.id)] = RunSummary(dict(sorted(tally.items())), items[:shown],
                                          len(items))
    return out


async def drift_rows(runs: Sequence[Any], session: Session = None) -> list[dict[str, Any]]:
    """The planned, pending and failed items of ``runs`` (objects with ``id``,
    ``status``), raw (``run``, ``index``, ``batch``, ``command``, ``outcome``,
    ``detail``), in plan order: one projected query for the ended runs (no model per
    item); a ``running`` run's and an old run's items read whole, their steps applied."""
    ended = [str(r.id) for r in runs if r.status != "running"]
    found: list[dict[str, Any]] = []
    if ended:
        found = [doc async for doc in SyncRunItem.get_pymongo_collection().find(
            {"run": {"$in": ended}, "outcome": {"$in": list(DRIFT_OUTCOMES)}},
            {"_id": 0, "run": 1, "index": 1, "batch": 1, "command": 1, "outcome": 1,
             "detail": 1}, session=session)]
    have = {doc["run"] for doc in found}
    missing = [i for i in ended if i not in have]
    if missing:  # a run with items has an item 0: the others may keep theirs on the run
        have |= {doc["run"] async for doc in SyncRunItem.get_pymongo_collection().find(
            {"run": {"$in": missing}, "index": 0}, {"_id": 0, "run": 1}, session=session)}
    rest = [r for r in runs if r.status == "running"
            or (str(r.id) not in have and str(r.id) in ended)]
    if rest:
        every = await items_of_runs(rest, session)
        found = [d for d in found if d["run"] not in every]
        for run_id, items in every.items():
            found += [{"run": run_id, "index": n, "batch": i.batch, "command": i.command,
                       "outcome": i.outcome, "detail": i.detail}
                      for n, i in enumerate(items) if i.outcome in DRIFT_OUTCOMES]
    return sorted(found, key=lambda d: (d["run"], int(d["index"])))

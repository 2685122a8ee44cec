"""The pure mapping from a slurm-quota v3 database to quota documents at one site.

slurm-quota (Rackslab) keeps one SQLite file: ``users`` and ``accounts`` (consumed and
quota CPU/GPU minutes, ``-1`` = unlimited), ``gpu_factors`` (a ``default`` row is the
fallback), ``settings`` (the ``default_{user,account}_quota_{cpu,gpu}_minutes`` of rows
it creates), the API roles ``operators``, ``managers`` and ``manager_accounts``, and
``jobs_preallocations``. ``slurm_quota_read.read_database`` reads it; this module maps
what it read, with what the store already holds (``Known``), into documents for the
writer (``migrate/writer.py``), refusals and notes. No I/O here.

What becomes what (docs/moving-in.md, "From slurm-quota", says the same):
- ``settings`` -> the site's ``QuotaDefaults`` (period ``none``: slurm-quota has no
  windows, balances only grow).
- a ``users``/``accounts`` row -> an own ``Quota`` only when its CPU or GPU quota
  differs from the default of its kind: slurm-quota writes a row with the
  defaults of the moment for every name it meets, so importing every row would pin
  thousands of subjects to today's defaults. Such a quota sets both values, the one
  equal to the default too: slurm-quota's row kept the value it had whatever the
  defaults became later, and so does ours. Its period follows the site's (``none`` as
  imported), as with ``ng quota set --cpu --gpu``: slurm-quota never set one.
- consumed minutes > 0 -> one opening ``QuotaAdjustment`` per subject, dated at the
  import (the current period of every ``none`` window), reason "opening balance from
  slurm-quota <file>".
- ``gpu_factors`` -> ``GpuFactor`` versions effective at the import (``default`` is our
  ``default`` type too); a type whose latest version already has the factor gets none.
- ``operators`` -> the ``operator`` role (sets quotas, defaults, factors, adjustments);
  ``managers`` with ``manager_accounts`` -> the ``manager`` role of those accounts (a
  read-only view, as in slurm-quota >= #63). Names that are not users in the store,
  and manager accounts that are not groups in it, are skipped and reported; nothing
  creates a user or a group. slurm-quota's admins live in ``serve.ini``, not here.
- ``jobs_preallocations`` are not imported: they are the old plugin's reservations for
  its own pending and running jobs.

Quota subjects that the store does not hold are imported all the same (a quota and the
usage ledger name users and accounts by name; a quota-only site holds none of them) and
listed as "not in the store".

Ids are ``uuid5`` of the site and the source row, and what an earlier import wrote is
found again (``Known``), so a second run maps every row to what is there and writes
nothing. A row whose earlier import differs (slurm-quota charged more since) is refused
with both values, never doubled.
"""

from __future__ import annotations

import math
import re
import uuid
from collections import defaultdict
from collections.abc import Mapping as MappingType
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import TypeAdapter, ValidationError

from ..models.auth import RoleGrant
from ..models.fields import PosixName
from ..models.quota import MAX_MINUTES, Quota, QuotaAdjustment, QuotaDefaults
from ..models.usage import GpuFactor
from ..validation import describe_validation_error
from .from_cheeto import Mapped, Mapping, Refusal

NAMESPACE = uuid.UUID("3c6b0f57-7d0e-5a1e-8f43-736c75726d71")  # fixed: ids stay stable
OP_NAME = "migrate_from_slurm_quota"
ORDER = ("quota_defaults", "quotas", "quota_adjustments", "gpu_factors", "role_grants")
KINDS = ("user", "account")
RESOURCES = ("cpu", "gpu")
DEFAULT_KEYS = {(kind, res): f"default_{kind}_quota_{res}_minutes"
                for kind in KINDS for res in RESOURCES}
# = operations.quota.GPU_TYPE_PATTERN (what ``ng quota gpu-factor set`` accepts)
GPU_TYPE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
MAX_FACTOR = 1000.0  # = GpuFactor.factor's bound
REASON_PATH_MAX = 400  # the reason holds the file's path, cut to this (reasons: 500)
LISTED = 20  # names a note lists before "and N more"
FOLLOWS = ["period"]  # what an imported quota leaves to the site's defaults

_posix = TypeAdapter(PosixName)


def import_id(collection: str, *parts: object) -> str:
    return uuid.uuid5(NAMESPACE, "/".join([collection, *map(str, parts)])).hex


@dataclass(frozen=True)
class Subject:
    """One ``users`` or ``accounts`` row as SQLite gave it (values may be any type:
    SQLite columns are loosely typed)."""

    name: Any
    consumed_cpu: Any
    quota_cpu: Any
    consumed_gpu: Any
    quota_gpu: Any


@dataclass(frozen=True)
class Source:
    """Everything the reader took from a slurm-quota v3 database."""

    users: Sequence[Subject] = ()
    accounts: Sequence[Subject] = ()
    gpu_factors: Sequence[tuple[Any, Any]] = ()
    settings: MappingType[str, Any] = field(default_factory=dict)
    operators: Sequence[Any] = ()
    managers: Sequence[Any] = ()
    manager_accounts: Sequence[tuple[Any, Any]] = ()
    preallocations: int = 0


@dataclass(frozen=True)
class Known:
    """What the store holds that the mapping must match (raw rows, no models)."""

    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    quotas: MappingType[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    adjustments: MappingType[str, dict[str, Any]] = field(default_factory=dict)  # by _id
    factors: Sequence[dict[str, Any]] = ()  # the site's GPU factor versions
    grants: MappingType[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    usage_until: datetime | None = None  # the site's usage watermark; None: never collected


@dataclass
class QuotaImport(Mapping):
    """The mapping plus what the report lists by name."""

    not_in_store: dict[str, list[str]] = field(
        default_factory=lambda: {"users": [], "accounts": []})
    skipped: list[str] = field(default_factory=list)


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:LISTED])
    return shown + (f" and {len(names) - LISTED} more" if len(names) > LISTED else "")


def _minutes_text(value: float | None) -> str:
    return "unlimited" if value is None else f"{value:g}"


def posix_name(value: Any) -> str | None:
    """``value`` when it is one of our POSIX names exactly (no stripping), else None."""
    if not isinstance(value, str):
        return None
    try:
        checked = _posix.validate_python(value)
    except ValidationError:
        return None
    return checked if checked == value else None


def _number(value: Any) -> float | None:
    """A finite number from a loosely typed SQLite value (an int, a float, a numeric
    string), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def quota_minutes(value: Any) -> tuple[float | None, str | None]:
    """slurm-quota's quota value -> (minutes or None for unlimited, problem). ``-1`` is
    unlimited (as is NULL: the column's default is -1)."""
    if value is None:
        return None, None
    number = _number(value)
    if number is None:
        return None, f"{value!r} is not a number of minutes"
    if number == -1:
        return None, None
    if not 0 <= number <= MAX_MINUTES:
        return None, f"{value!r} is neither -1 (unlimited) nor 0 to {MAX_MINUTES:g} minutes"
    return number, None


def consumed_minutes(value: Any) -> tuple[float, str | None]:
    """slurm-quota's consumed value -> (minutes, problem); NULL is 0 (the default)."""
    if value is None:
        return 0.0, None
    number = _number(value)
    if number is None or not 0 <= number <= MAX_MINUTES:
        return 0.0, f"consumed {value!r} is not 0 to {MAX_MINUTES:g} minutes"
    return number, None


class _Mapper:
    def __init__(self, source: Source, site: str, origin: str, known: Known,
                 now: datetime, author: str | None) -> None:
        self.source = source
        self.site = site
        self.known = known
        self.now = _aware(now).replace(microsecond=0)
        self.author = author
        path = origin if len(origin) <= REASON_PATH_MAX else "…" + origin[-REASON_PATH_MAX:]
        self.reason = f"opening balance from slurm-quota {path}"
        rows = len(source.users) + len(source.accounts)
        self.out = QuotaImport(order=ORDER, source_counts={
            "quota_defaults": 1, "quotas": rows, "quota_adjustments": rows,
            "gpu_factors": len(source.gpu_factors),
            "role_grants": len(source.operators) + len(source.managers)})
        self.defaults: dict[tuple[str, str], float | None] = {}

    def refuse(self, collection: str, source: str, reason: str) -> None:
        self.out.refusals.append(Refusal(collection, source, reason))

    def note(self, text: str) -> None:
        self.out.notes.append(text)

    def skip(self, text: str) -> None:
        self.out.skipped.append(text)

    def add(self, collection: str, doc: Any, source: str) -> None:
        self.out.docs[collection].append(Mapped(collection, (), doc, source))

    def build(self, collection: str, model: type[Any], data: dict[str, Any],
              source: str) -> Any:
        try:
            doc = model.model_validate(data)
        except ValidationError as exc:
            self.refuse(collection, source, describe_validation_error(exc))
            return None
        self.add(collection, doc, source)
        return doc

    # -- defaults ------------------------------------------------------------------------

    def map_defaults(self) -> None:
        settings = self.source.settings
        for (kind, res), key in DEFAULT_KEYS.items():
            raw = settings.get(key)
            value, problem = quota_minutes(raw)
            if raw is None and key not in settings:
                self.note(f"settings: {key} is missing; read as unlimited (-1), as "
                          "slurm-quota does")
            elif problem is not None:
                self.note(f"settings: {key} = {raw!r} is not a quota; read as unlimited "
                          "(-1), as slurm-quota does")
                value = None
            self.defaults[(kind, res)] = value
        self.build("quota_defaults", QuotaDefaults, {
            "id": import_id("quota_defaults", self.site), "site": self.site,
            **{f"{kind}_{res}_minutes": value for (kind, res), value in self.defaults.items()},
            "period": "none"}, "settings")

    # -- users and accounts --------------------------------------------------------------

    def map_subjects(self) -> None:
        only_defaults = {"user": 0, "account": 0}
        one_pinned = 0
        for kind, rows in (("user", self.source.users), ("account", self.source.accounts)):
            table = f"{kind}s"
            for row in rows:
                quotas: dict[str, float | None] = {}
                consumed: dict[str, float] = {}
                problems: list[str] = []
                for res in RESOURCES:
                    value, problem = quota_minutes(getattr(row, f"quota_{res}"))
                    quotas[res] = value
                    if problem:
                        problems.append(f"{res.upper()} quota {problem}")
                    used, problem = consumed_minutes(getattr(row, f"consumed_{res}"))
                    consumed[res] = used
                    if problem:
                        problems.append(f"{res.upper()} {problem}")
                label = f"{kind} {row.name!r}"
                if problems:
                    self.refuse(table, str(row.name), "; ".join(problems))
                    continue
                own = any(quotas[res] != self.defaults[(kind, res)] for res in RESOURCES)
                charged = any(consumed[res] > 0 for res in RESOURCES)
                if not own and not charged:
                    only_defaults[kind] += 1
                    continue
                name = posix_name(row.name)
                if name is None:
                    self.refuse(table, str(row.name), f"{label} is not a valid POSIX name "
                                "(lowercase letters, digits, '_', '.', '-'; at most 32), "
                                "and it holds a quota or consumed minutes")
                    continue
                imported = False
                if own:
                    imported |= self._quota(kind, name, quotas)
                    if sum(quotas[res] == self.defaults[(kind, res)] for res in RESOURCES):
                        one_pinned += 1
                if charged:
                    imported |= self._opening(kind, name, consumed)
                held = self.known.users if kind == "user" else self.known.groups
                if imported and name not in held:
                    self.out.not_in_store[table].append(name)
        for kind, count in only_defaults.items():
            if count:
                self.note(f"{count} {kind}{'s' if count > 1 else ''} with the default quotas "
                          "and nothing consumed: nothing to import (the site's defaults "
                          "apply to them here too)")
        if one_pinned:
            self.note(f"{one_pinned} own quota(s) differ from the defaults in one resource "
                      "only: the other is set to the default's value, as slurm-quota held "
                      "it (it does not follow later changes of the defaults)")
        for table, names in self.out.not_in_store.items():
            if names:
                self.note(f"{len(names)} {table} not in the store, imported all the same "
                          f"(quotas and usage name them): {_names(names)}")

    def _quota(self, kind: str, name: str, quotas: dict[str, float | None]) -> bool:
        stored = self.known.quotas.get((kind, name))
        wanted = {"cpu_minutes": quotas["cpu"], "gpu_minutes": quotas["gpu"]}
        follows = list(FOLLOWS)
        if stored is not None:
            # slurm-quota has no budgets (issue 28): a stored quota's budget, followed or
            # its own, is the store's and is kept as it is
            stored_follows = list(stored.get("follows_defaults") or [])
            same = (all(stored.get(k) == v for k, v in wanted.items())
                    and [f for f in stored_follows if f != "budget"] == FOLLOWS)
            follows = stored_follows
            wanted["budget"] = stored.get("budget")
            if not same:
                self.refuse("quotas", f"{kind} {name}", (
                    f"the store holds another quota (CPU "
                    f"{_minutes_text(stored.get('cpu_minutes'))}, GPU "
                    f"{_minutes_text(stored.get('gpu_minutes'))}, following the defaults "
                    f"in {', '.join(stored.get('follows_defaults') or []) or 'nothing'}); "
                    f"slurm-quota says CPU {_minutes_text(quotas['cpu'])}, GPU "
                    f"{_minutes_text(quotas['gpu'])}, the site's period (change or remove "
                    "one with `ng quota set`/`remove`)"))
                return False
        doc_id = stored["_id"] if stored is not None else import_id("quotas", self.site, kind,
                                                                     name)
        return self.build("quotas", Quota, {
            "id": doc_id, "site": self.site, kind: name, **wanted, "period": "none",
            "follows_defaults": follows},
            f"{kind} {name}") is not None

    def _opening(self, kind: str, name: str, consumed: dict[str, float]) -> bool:
        doc_id = import_id("quota_adjustments", self.site, kind, name)
        stored = self.known.adjustments.get(doc_id)
        data: dict[str, Any] = {"id": doc_id, "site": self.site, kind: name,
                                "cpu_minutes": consumed["cpu"], "gpu_minutes": consumed["gpu"]}
        if stored is not None:
            before = (float(stored.get("cpu_minutes") or 0), float(stored.get("gpu_minutes") or 0))
            if before != (consumed["cpu"], consumed["gpu"]):
                self.refuse("quota_adjustments", f"{kind} {name}", (
                    f"an earlier import opened the balance at CPU {before[0]:g}, GPU "
                    f"{before[1]:g} minutes; this database says CPU {consumed['cpu']:g}, GPU "
                    f"{consumed['gpu']:g} (charge the difference with `ng quota adjust`)"))
                return False
            at = _aware(stored["at"])
            data.update(reason=stored.get("reason") or self.reason, at=at,
                        at_epoch=int(stored.get("at_epoch") or at.timestamp()))
        else:
            data.update(reason=self.reason, at=self.now, at_epoch=int(self.now.timestamp()))
        return self.build("quota_adjustments", QuotaAdjustment, data,
                          f"{kind} {name}") is not None

    # -- GPU factors ---------------------------------------------------------------------

    def map_factors(self) -> None:
        versions: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in self.known.factors:
            versions[str(row.get("gpu_type"))].append(row)
        for gpu_type, raw in self.source.gpu_factors:
            factor = _number(raw)
            if not isinstance(gpu_type, str) or not GPU_TYPE_RE.fullmatch(gpu_type):
                self.refuse("gpu_factors", str(gpu_type), "not a GPU type name (letters, "
                            "digits, '_', '.', '-'; at most 64)")
                continue
            if factor is None or factor < 0:
                self.skip(f"GPU factor {gpu_type} = {raw!r}: slurm-quota ignores it, so is it "
                          "here")
                continue
            if factor > MAX_FACTOR:
                self.refuse("gpu_factors", gpu_type, f"factor {factor:g} is above "
                            f"{MAX_FACTOR:g}")
                continue
            latest = max(versions.get(gpu_type, ()), default=None,
                         key=lambda r: _aware(r["effective_from"]))
            if latest is not None and float(latest.get("factor", -1)) == factor:
                self.build("gpu_factors", GpuFactor, {
                    "id": latest["_id"], "site": self.site, "gpu_type": gpu_type,
                    "factor": factor, "effective_from": _aware(latest["effective_from"])},
                    gpu_type)
                continue
            if latest is not None and _aware(latest["effective_from"]) >= self.now:
                self.refuse("gpu_factors", gpu_type, (
                    f"the store has factor {float(latest.get('factor', 0)):g} from "
                    f"{_aware(latest['effective_from']).isoformat()}; factors only move "
                    f"forward in time (slurm-quota says {factor:g})"))
                continue
            self.build("gpu_factors", GpuFactor, {
                "id": import_id("gpu_factors", self.site, gpu_type, self.now.isoformat()),
                "site": self.site, "gpu_type": gpu_type, "factor": factor,
                "effective_from": self.now}, gpu_type)

    # -- roles ---------------------------------------------------------------------------

    def map_roles(self) -> None:
        for raw in self.source.operators:
            name = self._role_user(raw, "operator")
            if name is not None:
                self._grant(name, "operator", [])
        accounts: dict[Any, set[Any]] = defaultdict(set)
        for manager, account in self.source.manager_accounts:
            accounts[manager].add(account)
        orphans = sorted(str(m) for m in set(accounts) - set(self.source.managers))
        if orphans:
            self.skip(f"manager_accounts of {_names(orphans)}, who are not in managers")
        for raw in self.source.managers:
            name = self._role_user(raw, "manager")
            if name is None:
                continue
            kept: list[str] = []
            for account in sorted(accounts.get(raw, ()), key=str):
                checked = posix_name(account)
                if checked is None or checked not in self.known.groups:
                    self.skip(f"manager {name}: account {account!r} is not a group in the "
                              "store")
                else:
                    kept.append(checked)
            if not kept:
                self.skip(f"manager {name}: no account to manage (a manager here is granted "
                          "one or more)")
                continue
            self._grant(name, "manager", kept)
        self.note("slurm-quota's admins are listed in serve.ini ([authorization] admins), "
                  "not in its database: grant them with `ng role grant --role admin`")

    def _role_user(self, raw: Any, role: str) -> str | None:
        name = posix_name(raw)
        if name is None:
            self.skip(f"{role} {raw!r}: not a valid POSIX name")
        elif name not in self.known.users:
            self.skip(f"{role} {name}: not a user in the store (no user is created)")
            return None
        return name

    def _grant(self, user: str, role: str, accounts: list[str]) -> None:
        stored = self.known.grants.get((user, role))
        if stored is not None:
            held = set(stored.get("accounts") or [])
            if not set(accounts) <= held:
                missing = sorted(set(accounts) - held)
                self.skip(f"manager {user}: already manages {_names(sorted(held))}; not "
                          f"changed (add {_names(missing)} with `ng role grant --user {user} "
                          f"--role manager -A …`)")
                return
            self.build("role_grants", RoleGrant, {
                "id": stored["_id"], "user": user, "role": role,
                "accounts": list(stored.get("accounts") or []),
                "granted_by": stored.get("granted_by")}, f"{role} {user}")
            return
        self.build("role_grants", RoleGrant, {
            "id": import_id("role_grants", user, role), "user": user, "role": role,
            "accounts": accounts, "granted_by": self.author}, f"{role} {user}")

    # -- the rest ------------------------------------------------------------------------

    def finish(self) -> QuotaImport:
        if self.source.preallocations:
            self.note(f"{self.source.preallocations} jobs_preallocations row(s) not imported: "
                      "they are the old plugin's reservations for its own pending and "
                      "running jobs (ours counts running jobs from Slurm)")
        if self.out.docs.get("quota_adjustments"):
            at = self.now.strftime("%Y-%m-%dT%H:%M:%SZ")
            if self.known.usage_until is None:
                self.note("the opening balances hold every job slurm-quota charged: start "
                          f"this site's usage collection at the import (`cheeto ng usage "
                          f"collect --site {self.site} --since {at}`), or a first collect "
                          "looks back 30 days and charges those jobs again")
            else:
                until = _aware(self.known.usage_until).strftime("%Y-%m-%dT%H:%M:%SZ")
                self.note(f"the usage ledger of {self.site} already holds jobs collected up "
                          f"to {until}: those that slurm-quota charged too count twice "
                          "(credit them with `ng quota adjust`)")
        if self.out.skipped:
            self.note(f"{len(self.out.skipped)} row(s) skipped (listed under skipped)")
        return self.out


def map_slurm_quota(source: Source, *, site: str, origin: str, known: Known,
                    now: datetime, author: str | None = None) -> QuotaImport:
    """The documents that reproduce ``source`` at ``site``; ``origin`` (the file's path)
    goes into the opening balances' reason, ``now`` is when factors and balances start."""
    mapper = _Mapper(source, site, origin, known, now, author)
    mapper.map_defaults()
    mapper.map_subjects()
    mapper.map_factors()
    mapper.map_roles()
    return mapper.finish()

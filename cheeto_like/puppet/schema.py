"""Pydantic models of the legacy puppet.hpc account YAML, and the checks around them.

The format (top-level ``user``, ``group``, ``share``, ``meta``) is what puppet and HiPPO
still read, so the models follow it field for field; the scalar checks are the project's
own (``models/fields.py``), so a uid or a shell that the store would refuse is refused
here too. Differences from the reference schema, all deliberate:

- user and group names must match the kerberos-id pattern *completely* (the reference's
  pattern was not anchored at the end, so ``alice!!`` passed);
- ids stop at 4294967295 (the reference allowed 2**32, which does not fit a uid_t), and
  ``true`` is not the uid 1;
- unknown keys are errors, because a misspelt key (``shel:``) is otherwise silently
  ignored by puppet;
- set-like lists (groups, sponsors, tags, QOS flags) come out sorted and de-duplicated,
  since the additive merge concatenates them;
- QOS ``mem`` is normalised to whole megabytes (``1T`` -> ``1048576M``).

``--partial`` validation (site layers checked on their own) skips the required-field
check only; every value that is present is still validated.

Errors are ``Problem`` objects (a key path and a sentence) rather than pydantic's
report, so the CLI can print ``farm.yaml: user.alice.uid: id … is outside …``, naming
the file that set the value even after several files were merged.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import ROUND_CEILING
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ..constants import SLURM_QOS_VALID_FLAGS
from ..errors import InvalidInput
from ..models.fields import Email, Fqdn, Quota, Shell, UnixId, parse_quota_mb
from .merge import Forest
from .yamlio import dumps

# A kerberos id: 1-32 characters, or up to 32 ending in '$' (machine accounts).
KERBEROS_ID_RE = re.compile(r"[a-z_]([a-z0-9_-]{0,31}|[a-z0-9_-]{0,30}\$)")
SHARE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
PARTIAL = "partial"  # the validation-context flag that skips required fields


# -- scalar types --------------------------------------------------------------------------


def _kerberos_id(value: str) -> str:
    if not KERBEROS_ID_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a valid user or group name (lowercase letters, "
                         "digits, '_' and '-', starting with a letter or '_', at most 32)")
    return value


def _share_name(value: str) -> str:
    if not SHARE_NAME_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a valid share name (letters, digits, '.', '_', '-')")
    return value


def _not_bool(value: Any) -> Any:
    # YAML's ``true`` would otherwise become the integer 1.
    if isinstance(value, bool):
        raise ValueError("expected a number, not true/false")
    return value


def _absolute_path(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"{value!r} is not an absolute path")
    return value


def _expiry(value: Any) -> Any:
    # An unquoted 2025-06-30 arrives as a date from the YAML loader; keep it as text.
    if isinstance(value, datetime):
        return value.date().isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str):
        if value == "absent":
            return value
        if DATE_RE.fullmatch(value):
            try:
                date.fromisoformat(value)
                return value
            except ValueError:
                pass
    raise ValueError(f"expiry {value!r} must be a date (YYYY-MM-DD) or 'absent'")


def _mem(value: Any) -> Any:
    """``512G``, ``1.5T`` or a bare number of megabytes -> ``<n>M`` (rounded up)."""
    if isinstance(value, bool):
        raise ValueError("mem must be a size like 500G, not true/false")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"mem {value} must not be negative")
        return f"{value}M"
    if isinstance(value, str) and value.strip().isdigit():
        return f"{int(value.strip())}M"
    megabytes = parse_quota_mb(value)
    return f"{int(megabytes.to_integral_value(rounding=ROUND_CEILING))}M"


def _qos_flag(value: str) -> str:
    if value not in SLURM_QOS_VALID_FLAGS:
        raise ValueError(f"QOS flag {value!r} is not one of {', '.join(SLURM_QOS_VALID_FLAGS)}")
    return value


def _sorted_unique(values: list[str]) -> list[str]:
    return sorted(set(values))


def _none_is_empty(value: Any) -> Any:
    # ``user:`` with nothing under it is an empty map, not an error.
    return {} if value is None else value


KerberosId = Annotated[str, AfterValidator(_kerberos_id)]
ShareName = Annotated[str, AfterValidator(_share_name)]
PuppetId = Annotated[UnixId, BeforeValidator(_not_bool)]
Count = Annotated[int, BeforeValidator(_not_bool), Field(ge=0)]
AbsPath = Annotated[str, AfterValidator(_absolute_path)]
Expiry = Annotated[str, BeforeValidator(_expiry)]
Mem = Annotated[str, BeforeValidator(_mem)]
NameList = Annotated[list[KerberosId], AfterValidator(_sorted_unique)]
TagList = Annotated[list[Annotated[str, Field(min_length=1)]], AfterValidator(_sorted_unique)]
QosFlags = Annotated[list[Annotated[str, AfterValidator(_qos_flag)]],
                     AfterValidator(_sorted_unique)]


def _either(first: Any, first_tag: str, second: Any, second_tag: str, pick: Any) -> Any:
    """A union that tries one member only, chosen by ``pick`` (no error per member).
    Tags look like ``<bool>`` so ``problems_from`` can drop them from error paths."""
    return Annotated[Annotated[first, Tag(first_tag)] | Annotated[second, Tag(second_tag)],
                     Discriminator(pick)]


# -- records ------------------------------------------------------------------------------


class Record(BaseModel):
    """Base of every record: unknown keys are errors; ``required_fields`` must be present
    unless the validation context says ``partial``."""

    model_config = ConfigDict(extra="forbid")
    required_fields: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="after")
    def _required_present(self, info: ValidationInfo) -> Self:
        if (info.context or {}).get(PARTIAL):
            return self
        missing = [name for name in self.required_fields if getattr(self, name) is None]
        if missing:
            raise PydanticCustomError("missing_fields", "required but missing",
                                      {"fields": ",".join(missing)})
        return self


class PuppetZfs(Record):
    required_fields = ("quota",)
    quota: Quota | None = None


class PuppetAutofs(Record):
    required_fields = ("nas", "path")
    nas: Fqdn | None = None
    path: AbsPath | None = None
    options: str | None = None


ZfsOrBool = _either(bool, "<bool>", PuppetZfs, "<mapping>",
                    lambda v: "<bool>" if isinstance(v, bool) else "<mapping>")


class PuppetUserStorage(Record):
    zfs: ZfsOrBool | None = None
    autofs: PuppetAutofs | None = None


class PuppetQosLimits(Record):
    cpus: Count | None = None
    gpus: Count | None = None
    mem: Mem | None = None


class PuppetQos(Record):
    group: PuppetQosLimits | None = None
    user: PuppetQosLimits | None = None
    job: PuppetQosLimits | None = None
    priority: Count | None = None
    flags: QosFlags | None = None


QosOrName = _either(str, "<name>", PuppetQos, "<qos>",
                    lambda v: "<name>" if isinstance(v, str) else "<qos>")
AccountOrList = _either(KerberosId, "<name>", list[KerberosId], "<list>",
                        lambda v: "<name>" if isinstance(v, str) else "<list>")


class PuppetPartition(Record):
    qos: QosOrName | None = None


class PuppetSlurm(Record):
    account: AccountOrList | None = None
    partitions: dict[str, PuppetPartition] | None = None
    max_jobs: Count | None = None
    max_group_jobs: Count | None = None
    max_submit_jobs: Count | None = None


class PuppetUser(Record):
    """``user.<kerberos id>``."""

    required_fields = ("fullname", "email", "uid", "gid")
    fullname: str | None = None
    email: Email | None = None
    uid: PuppetId | None = None
    gid: PuppetId | None = None
    groups: NameList | None = None
    group_sudo: NameList | None = None
    password: str | None = None
    shell: Shell | None = None
    tag: TagList | None = None
    home: AbsPath | None = None
    expiry: Expiry | None = None
    ensure: Literal["present", "absent"] | None = None
    membership: Literal["inclusive", "minimum"] | None = None
    storage: PuppetUserStorage | None = None
    slurm: PuppetSlurm | None = None


class PuppetGroupStorage(Record):
    required_fields = ("name", "owner")
    name: str | None = None
    owner: KerberosId | None = None
    group: KerberosId | None = None
    autofs: PuppetAutofs | None = None
    zfs: ZfsOrBool | None = None
    globus: bool = False


class PuppetGroup(Record):
    """``group.<name>``."""

    required_fields = ("gid",)
    gid: PuppetId | None = None
    sponsors: NameList | None = None
    ensure: Literal["present", "absent"] | None = None
    tag: TagList | None = None
    slurm: PuppetSlurm | None = None
    storage: list[PuppetGroupStorage] | None = None


class PuppetShareStorage(Record):
    required_fields = ("owner", "group")
    owner: KerberosId | None = None
    group: KerberosId | None = None
    zfs: ZfsOrBool | None = None
    autofs: PuppetAutofs | None = None


class PuppetShare(Record):
    """``share.<name>``."""

    required_fields = ("storage",)
    storage: PuppetShareStorage | None = None


class PuppetMeta(Record):
    admin_sponsors: NameList | None = None


class PuppetAccountMap(Record):
    """One account file (or several merged): the whole legacy document."""

    user: Annotated[dict[KerberosId, PuppetUser], BeforeValidator(_none_is_empty)] = {}
    group: Annotated[dict[KerberosId, PuppetGroup], BeforeValidator(_none_is_empty)] = {}
    share: Annotated[dict[ShareName, PuppetShare], BeforeValidator(_none_is_empty)] = {}
    meta: PuppetMeta | None = None

    def dump(self) -> str:
        """The document in the repository's YAML style (``yamlio.dumps``)."""
        return dumps(self.model_dump(exclude_none=True))


# -- problems -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a document: where (a key path) and what."""

    loc: tuple[str | int, ...]
    message: str
    value: Any = None  # the offending list item, to find the file that added it

    @property
    def path(self) -> str:
        return ".".join(str(part) for part in self.loc)

    def describe(self, forest: Forest | None = None) -> str:
        """``file: path: message`` (the file(s) that wrote the value, when known)."""
        where = f"{self.path}: " if self.loc else "(top level): "
        prefix = f"{forest.label(self.loc, self.value)}: " if forest is not None else ""
        return f"{prefix}{where}{self.message}"


def _is_tag(part: Any) -> bool:
    return isinstance(part, str) and part.startswith("<") and part.endswith(">")


def _yaml_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, list | tuple | set):
        return "a list"
    if isinstance(value, str):
        return f"the string {value!r}"
    return "a number" if isinstance(value, int | float) else type(value).__name__


def problems_from(exc: ValidationError) -> list[Problem]:
    """pydantic's errors as ``Problem``s: union tags dropped, messages plain English."""
    problems: list[Problem] = []
    for error in exc.errors(include_url=False):
        loc = tuple(p for p in error["loc"] if not _is_tag(p))
        message: str = error["msg"].removeprefix("Value error, ")
        kind = error["type"]
        if loc and loc[-1] == "[key]":
            loc = loc[:-1]
            message = f"bad name: {message}"
        if kind == "missing_fields":
            fields = str((error.get("ctx") or {}).get("fields", "")).split(",")
            problems.extend(Problem((*loc, name), "required but missing") for name in fields)
            continue
        if kind == "extra_forbidden":
            message = "unknown key"
        elif kind in ("model_type", "model_attributes_type", "dict_type"):
            message = f"expected a mapping, got {_yaml_kind(error.get('input'))}"
        elif kind == "missing":
            message = "required but missing"
        problems.append(Problem(loc, message))
    return problems


def validate_accounts(data: Any, *, partial: bool = False
                      ) -> tuple[PuppetAccountMap | None, list[Problem]]:
    """Validate one (merged) document: the model, or ``None`` and what is wrong."""
    try:
        return PuppetAccountMap.model_validate(data, context={PARTIAL: partial}), []
    except ValidationError as exc:
        return None, problems_from(exc)


def postload_problems(accounts: PuppetAccountMap) -> list[Problem]:
    """Cross-record checks the schema cannot make on one record: every sponsor is a
    known user, and every group in a user's ``groups``/``group_sudo`` is a known group
    or user (a user name stands for their personal group)."""
    users, groups = set(accounts.user), set(accounts.group)
    problems = []
    for name, group in sorted(accounts.group.items()):
        for sponsor in group.sponsors or []:
            if sponsor not in users:
                problems.append(Problem(("group", name, "sponsors"),
                                        f"sponsor {sponsor!r} is not a known user", sponsor))
    for name, user in sorted(accounts.user.items()):
        for key in ("groups", "group_sudo"):
            for member_of in getattr(user, key) or []:
                if member_of not in groups and member_of not in users:
                    problems.append(Problem(("user", name, key),
                                            f"group {member_of!r} is not a known group",
                                            member_of))
    return problems


class PuppetValidationError(InvalidInput):
    """Invalid account YAML: every problem, each naming its file and field."""

    def __init__(self, lines: Sequence[str]) -> None:
        self.lines = list(lines)
        more = len(self.lines) - 1
        suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more > 0 else ""
        super().__init__(f"{self.lines[0]}{suffix}")

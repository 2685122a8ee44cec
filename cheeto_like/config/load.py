"""Reading the file: pick each profiled section's block for the chosen profile, validate
everything, and turn every failure into one ``ConfigError`` line.

Validators are built for what a file holds, not for the whole tree (issue 31: building
them all was ~50 ms of every CLI start-up): config blocks are ``defer_build`` (``Block``),
the file is validated by ``_ConfigFile`` cut to the sections present
(``_file_model``: same fields, same order, same errors), and ``Config`` is assembled from
the validated blocks with ``model_construct`` (they are its fields' own types, which it
would have kept as they are).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from ruamel.yaml import YAML, YAMLError

from ..errors import ConfigError
from ..validation import describe_validation_error
from . import paths
from .api import ApiConfig, ClientConfig
from .base import Block, UserPath
from .daemon import DaemonConfig
from .ldap import LDAPConfig
from .mail import AlertsConfig, AuditConfig, MailConfig
from .metrics import MetricsConfig
from .offboarding import OffboardingConfig
from .paths import DEFAULT_PROFILE, PROFILED_SECTIONS
from .people import HippoConfig, IAMConfig
from .requests import RequestsConfig
from .retention import RetentionConfig
from .slurm import SlurmConfig
from .store import MongoConfig
from .usage import UsageConfig


class Config(Block):
    """The resolved configuration for one profile."""

    path: UserPath | None = None
    profile: str = DEFAULT_PROFILE
    mongo: MongoConfig = Field(default_factory=MongoConfig)
    ldap: LDAPConfig | None = None
    daemon: DaemonConfig | None = None
    api: ApiConfig | None = None
    hippo: HippoConfig | None = None
    ucdiam: IAMConfig | None = None
    mail: MailConfig | None = None
    alerts: AlertsConfig | None = None
    audit: AuditConfig | None = None
    slurm: SlurmConfig = Field(default_factory=SlurmConfig)
    usage: UsageConfig = Field(default_factory=UsageConfig)
    client: ClientConfig | None = None
    requests: RequestsConfig = Field(default_factory=RequestsConfig)
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    offboarding: OffboardingConfig = Field(default_factory=OffboardingConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)

    @property
    def client_only(self) -> bool:
        """A login node's config: a file with a ``client`` section and no ``mongo`` one
        (the store's commands have no store here; the defaults would start a local one)."""
        return (self.path is not None and self.client is not None
                and "mongo" not in self.model_fields_set)


class _ConfigFile(BaseModel):
    """The file's shape: profiled sections are maps of profile -> block. Never validated
    whole: ``_file_model`` takes the fields of the sections a file has."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    mongo: dict[str, MongoConfig] = Field(default_factory=dict)
    ldap: dict[str, LDAPConfig] = Field(default_factory=dict)
    daemon: dict[str, DaemonConfig] = Field(default_factory=dict)
    api: dict[str, ApiConfig] = Field(default_factory=dict)
    hippo: HippoConfig | None = None
    ucdiam: IAMConfig | None = None
    mail: MailConfig | None = None
    alerts: AlertsConfig | None = None
    audit: AuditConfig | None = None
    slurm: SlurmConfig = Field(default_factory=SlurmConfig)
    usage: UsageConfig = Field(default_factory=UsageConfig)
    client: ClientConfig | None = None
    requests: RequestsConfig = Field(default_factory=RequestsConfig)
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    offboarding: OffboardingConfig = Field(default_factory=OffboardingConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)


@lru_cache(maxsize=64)
def _file_model(sections: tuple[str, ...]) -> type[BaseModel]:
    """``_ConfigFile`` with only ``sections`` (in its field order): unknown keys still
    fail as ``extra_forbidden``, and the first error is the one the whole model names."""
    fields: dict[str, Any] = {name: (_ConfigFile.model_fields[name].annotation,
                                     _ConfigFile.model_fields[name]) for name in sections}
    return create_model("_ConfigFile", __config__=ConfigDict(extra="forbid"), **fields)


def _validate_file(raw: dict[str, Any]) -> dict[str, Any]:
    """Every ``_ConfigFile`` section: validated from the file, else its default."""
    present = tuple(name for name in _ConfigFile.model_fields if name in raw)
    parsed = _file_model(present).model_validate(raw)
    return {name: getattr(parsed, name) if name in present
            else info.get_default(call_default_factory=True)
            for name, info in _ConfigFile.model_fields.items()}


def resolve_config_path(explicit: str | os.PathLike[str] | None) -> tuple[Path, bool]:
    """(path, must_exist): an explicit or ``CHEETO_CONFIG`` path must exist, the default
    path may be absent (then built-in defaults apply)."""
    if explicit:
        return Path(explicit).expanduser(), True
    if env := os.environ.get("CHEETO_CONFIG"):
        return Path(env).expanduser(), True
    return paths.default_config_path(), False


def resolve_profile(explicit: str | None) -> str:
    return explicit or os.environ.get("CHEETO_PROFILE") or DEFAULT_PROFILE


def load_config(path: str | os.PathLike[str] | None = None, profile: str | None = None) -> Config:
    """Read, validate and resolve the configuration; raises ``ConfigError`` (one line)."""
    file_path, must_exist = resolve_config_path(path)
    chosen = resolve_profile(profile)
    if not file_path.exists():
        if must_exist:
            raise ConfigError(f"config file {file_path} does not exist")
        if chosen != DEFAULT_PROFILE:
            raise ConfigError(f"profile {chosen!r} is not defined: there is no config file "
                              f"({file_path})")
        return Config.model_construct(path=None, profile=chosen)
    raw = _read_yaml(file_path)
    try:
        parsed = _validate_file(raw)
    except ValidationError as exc:
        raise ConfigError(f"config {file_path}: {describe_validation_error(exc)}") from None
    _check_profile(parsed, chosen, file_path)
    picked: dict[str, Any] = {}
    for section in PROFILED_SECTIONS:
        blocks: dict[str, Any] = parsed[section]
        block = blocks.get(chosen, blocks.get(DEFAULT_PROFILE))
        if block is not None:
            picked[section] = block
    shared = {name: value for name, value in parsed.items() if name not in PROFILED_SECTIONS}
    return Config.model_construct(path=file_path.expanduser(), profile=chosen, **shared,
                                  **picked)


def _check_profile(parsed: dict[str, Any], chosen: str, file_path: Path) -> None:
    """A profile no section defines is a typo (``-p prod`` against a file without a
    ``prod`` block), not a request for the defaults: one line naming the known ones.
    Sections the profile does not define still fall back to ``default``."""
    defined = {name for section in PROFILED_SECTIONS for name in parsed[section]}
    if chosen != DEFAULT_PROFILE and chosen not in defined:
        known = ", ".join(sorted(defined | {DEFAULT_PROFILE}))
        raise ConfigError(f"profile {chosen!r} is not defined in {file_path} "
                          f"(profiles: {known})")


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"config {path}: cannot read: {exc.strerror}") from None
    try:
        data = YAML(typ="safe").load(text)
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"config {path}: invalid YAML{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config {path}: the top level must be a mapping of sections")
    return data

"""Configuration: one YAML file, with profiles for the per-environment sections.

``ldap``, ``mongo``, ``daemon`` and ``api`` are maps of profile name -> block; the chosen
profile (``--profile``/``CHEETO_PROFILE``) falls back to ``default``. ``hippo`` and
``ucdiam`` are global. Every block forbids unknown keys, so a typo is an error that
names the key instead of a silently ignored setting.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from ruamel.yaml import YAML, YAMLError

from .errors import ConfigError
from .validation import describe_validation_error

PROFILED_SECTIONS = ("mongo", "ldap", "daemon", "api")
DEFAULT_PROFILE = "default"


UserPath = Annotated[Path, AfterValidator(lambda p: p.expanduser())]


def xdg_config_home() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")


def xdg_data_home() -> Path:
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")


def default_config_path() -> Path:
    return xdg_config_home() / "cheeto" / "config.yaml"


class Block(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EmbeddedStoreConfig(Block):
    """The embedded store: an nx-27017 server on SQLite files in ``path`` (a directory)."""

    path: UserPath = Field(default_factory=lambda: xdg_data_home() / "cheeto" / "store")
    host: str = "127.0.0.1"
    port: int = Field(default=27117, ge=1, le=65535)


class MongoConfig(Block):
    """``uri`` names a real MongoDB (replica set); without it the embedded store is used."""

    uri: str | None = None
    database: str = Field(default="cheeto", pattern=r"^[A-Za-z0-9_-]{1,63}$")
    user: str | None = None
    password: SecretStr | None = None
    auth_source: str | None = None
    tls: bool = False
    tls_ca_file: UserPath | None = None
    timeout_seconds: float = Field(default=5.0, gt=0)
    embedded: EmbeddedStoreConfig = Field(default_factory=EmbeddedStoreConfig)

    @property
    def is_embedded(self) -> bool:
        return self.uri is None


class LDAPConfig(Block):
    """The directory the LDAP reconciler writes (``cheeto ng ldap …``).

    Users are global entries under ``user_base``; each site gets ``ou=<site>`` under
    ``site_base`` with ``ou=<groups_ou>`` (posix groups) and ``ou=<automount_ou>`` (maps).
    ``servers`` are tried in order (failover); ``ldaps://`` URLs use TLS, ``ldap://`` ones
    StartTLS when ``use_tls`` is set, verified against ``ca_file``.
    """

    servers: list[str] = Field(min_length=1)
    searchbase: str = Field(min_length=1)
    user_base: str | None = None  # default ou=users,<searchbase>
    site_base: str | None = None  # default <searchbase>
    groups_ou: str = Field(default="groups", min_length=1)
    automount_ou: str = Field(default="automount", min_length=1)
    login_dn: str | None = None
    password: SecretStr | None = None
    request_timeout_seconds: float = Field(default=10.0, gt=0)
    connect_timeout_seconds: float = Field(default=5.0, gt=0)
    pool_max_connections: int = Field(default=5, ge=1)
    pool_idle_connections: int = Field(default=2, ge=0)
    use_tls: bool = False
    ca_file: UserPath | None = None
    cert_policy: Literal["demand", "allow", "try", "never"] = "demand"
    # automount: the master map's name, how a master entry names its map ({dn} or {name},
    # e.g. "ldap:{dn}"), extra master options per map (auto.group: --ghost), and the text
    # put after each NFS host (kept as the autofs variable the reference wrote).
    master_map: str = Field(default="auto.master", min_length=1)
    master_entry_format: str = "{dn}"
    master_options: dict[str, str] = Field(default_factory=dict)
    host_suffix: str = "${HOST_SUFFIX}"
    # tag every sshPublicKey with environment="REMOTE_SSH_USER=<user>"
    ssh_user_prefix: bool = True
    # entries under user_base that a prune never deletes
    protected_users: list[str] = Field(default_factory=lambda: ["admin"])

    @field_validator("servers")
    @classmethod
    def _ldap_urls(cls, value: list[str]) -> list[str]:
        for url in value:
            if not re.match(r"^ldaps?://[^/\s]+/?$", url):
                raise ValueError(f"{url!r} is not an ldap:// or ldaps:// server URL")
        return value

    @field_validator("master_entry_format")
    @classmethod
    def _known_placeholders(cls, value: str) -> str:
        try:
            value.format(dn="", name="")
        except (KeyError, IndexError, ValueError):
            raise ValueError(f"master_entry_format {value!r} may only use {{dn}} and {{name}}"
                             ) from None
        return value

    @property
    def users_dn(self) -> str:
        return self.user_base or f"ou=users,{self.searchbase}"

    @property
    def sites_dn(self) -> str:
        return self.site_base or self.searchbase


class HippoConfig(Block):
    base_url: str
    api_key: SecretStr
    site_aliases: dict[str, str] = Field(default_factory=dict)
    max_tries: int = Field(default=3, ge=1)
    request_timeout_seconds: float = Field(default=30.0, gt=0)


class IAMConfig(Block):
    base_url: str
    api_key: SecretStr
    grace_days: int = Field(default=0, ge=0)
    expiry_offset_days: int = Field(default=30, ge=0)
    request_timeout_seconds: float = Field(default=30.0, gt=0)


class BrokerSSLConfig(Block):
    ca_file: UserPath | None = None
    cert_file: UserPath | None = None
    key_file: UserPath | None = None
    cert_reqs: Literal["none", "optional", "required"] = "required"


class DaemonConfig(Block):
    """Celery settings; ``tasks`` maps a task name to its block (absent = disabled).

    The task blocks are validated by the daemon, which owns their schema.
    """

    broker_url: str = "amqp://guest:guest@127.0.0.1:5672//"
    broker_use_ssl: BrokerSSLConfig | None = None
    sites: list[str] = Field(default_factory=list)
    author: str = "cheeto-daemon"
    timezone: str = "America/Los_Angeles"
    beat_schedule_filename: UserPath = Path("/var/lib/cheeto/celerybeat-schedule")
    task_time_limit: int = Field(default=3600, gt=0)
    tasks: dict[str, dict[str, Any]] = Field(default_factory=dict)


def _url_path(value: str) -> str:
    """``cheeto/`` -> ``/cheeto``; empty stays empty (a URL path prefix)."""
    value = value.strip().strip("/")
    if not value:
        return ""
    if not re.fullmatch(r"[A-Za-z0-9._~!$&'()*+,;=:@%/-]+", value) or "//" in value:
        raise ValueError(f"{value!r} is not a URL path")
    return f"/{value}"


class ApiConfig(Block):
    """The REST API (``cheeto daemon api``).

    Without ``api_key`` the API is open, so it refuses a non-loopback ``host`` unless
    started with ``--insecure``. ``prefix`` is where the routes (and ``/healthz``,
    ``/openapi.json``, ``/docs``) are mounted; ``root_path`` is the path a reverse proxy
    strips before forwarding. ``tls_cert`` and ``tls_key`` (both or neither) serve HTTPS.
    """

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    api_key: SecretStr | None = None
    root_path: Annotated[str, AfterValidator(_url_path)] = ""
    prefix: Annotated[str, AfterValidator(_url_path)] = ""
    tls_cert: UserPath | None = None
    tls_key: UserPath | None = None

    @field_validator("api_key")
    @classmethod
    def _usable_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("api_key is empty (leave it out for an open, loopback-only API)")
        return value

    @model_validator(mode="after")
    def _tls_pair(self) -> ApiConfig:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together (set both or neither)")
        return self


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


class _ConfigFile(BaseModel):
    """The file's shape: profiled sections are maps of profile -> block."""

    model_config = ConfigDict(extra="forbid")

    mongo: dict[str, MongoConfig] = Field(default_factory=dict)
    ldap: dict[str, LDAPConfig] = Field(default_factory=dict)
    daemon: dict[str, DaemonConfig] = Field(default_factory=dict)
    api: dict[str, ApiConfig] = Field(default_factory=dict)
    hippo: HippoConfig | None = None
    ucdiam: IAMConfig | None = None


def resolve_config_path(explicit: str | os.PathLike[str] | None) -> tuple[Path, bool]:
    """(path, must_exist): an explicit or ``CHEETO_CONFIG`` path must exist, the default
    path may be absent (then built-in defaults apply)."""
    if explicit:
        return Path(explicit).expanduser(), True
    if env := os.environ.get("CHEETO_CONFIG"):
        return Path(env).expanduser(), True
    return default_config_path(), False


def resolve_profile(explicit: str | None) -> str:
    return explicit or os.environ.get("CHEETO_PROFILE") or DEFAULT_PROFILE


def load_config(path: str | os.PathLike[str] | None = None, profile: str | None = None) -> Config:
    """Read, validate and resolve the configuration; raises ``ConfigError`` (one line)."""
    file_path, must_exist = resolve_config_path(path)
    chosen = resolve_profile(profile)
    if not file_path.exists():
        if must_exist:
            raise ConfigError(f"config file {file_path} does not exist")
        return Config(path=None, profile=chosen)
    raw = _read_yaml(file_path)
    try:
        parsed = _ConfigFile.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"config {file_path}: {describe_validation_error(exc)}") from None
    picked: dict[str, Any] = {}
    for section in PROFILED_SECTIONS:
        blocks: dict[str, Any] = getattr(parsed, section)
        block = blocks.get(chosen, blocks.get(DEFAULT_PROFILE))
        if block is not None:
            picked[section] = block
    return Config(path=file_path, profile=chosen, hippo=parsed.hippo, ucdiam=parsed.ucdiam,
                  **picked)


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


_URI_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@]*):(?P<pw>[^@/]*)@")
MASK = "********"


def mask_uri(uri: str) -> str:
    """Hide the password part of ``scheme://user:password@host`` URIs."""
    return _URI_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", uri)


def config_for_display(config: Config) -> dict[str, Any]:
    """The resolved config as plain data with every secret masked."""

    def scrub(value: Any) -> Any:
        if isinstance(value, SecretStr):
            return MASK
        if isinstance(value, BaseModel):
            return {k: scrub(getattr(value, k)) for k in type(value).model_fields}
        if isinstance(value, dict):
            return {k: scrub(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [scrub(v) for v in value]
        if isinstance(value, Path):
            return str(value)
        if isinstance(value, str):
            return mask_uri(value)
        return value

    return scrub(config)


SKELETON = """\
# cheeto configuration. Sections mongo, ldap, daemon and api hold one block per
# profile; pick one with --profile/-p or CHEETO_PROFILE (falls back to "default").
# hippo and ucdiam are global. Unknown keys are errors.

mongo:
  default:
    # Leave uri unset to use the embedded store (an nx-27017 server on SQLite files).
    # uri: mongodb://db1.example.org,db2.example.org/?replicaSet=rs0
    database: cheeto
    # user: cheeto
    # password: secret
    # auth_source: admin
    # tls: true
    # tls_ca_file: /etc/ssl/certs/mongo-ca.pem
    embedded:
      # path: ~/.local/share/cheeto/store
      host: 127.0.0.1
      port: 27117

# ldap:
#   default:
#     servers: [ldaps://ldap1.example.org, ldaps://ldap2.example.org]  # tried in order
#     searchbase: dc=hpc,dc=example,dc=org
#     user_base: ou=people,dc=hpc,dc=example,dc=org     # default ou=users,<searchbase>
#     # site_base: dc=hpc,dc=example,dc=org             # parent of ou=<site>
#     # groups_ou: groups                                # ou=groups,ou=<site>,…
#     # automount_ou: automount                          # ou=automount,ou=<site>,…
#     login_dn: cn=admin,dc=hpc,dc=example,dc=org
#     password: secret
#     ca_file: /etc/ssl/certs/ldap-ca.pem
#     # use_tls: true                 # StartTLS for ldap:// servers
#     # request_timeout_seconds: 10
#     # connect_timeout_seconds: 5
#     # pool_max_connections: 5
#     # master_map: auto.master
#     # master_entry_format: "{dn}"   # or "ldap:{dn}", "{name}"
#     # master_options: {auto.group: --ghost}
#     # host_suffix: "${HOST_SUFFIX}"
#     # ssh_user_prefix: true         # environment="REMOTE_SSH_USER=<user>" <key>
#     # protected_users: [admin]      # never pruned

# daemon:
#   default:
#     broker_url: amqps://cheeto:secret@broker.example.org:5671//
#     sites: [farm]
#     author: cheeto-daemon
#     tasks:
#       slurm_sync: {schedule: 600}
#       ldap_sync: {schedule: "*/15 * * * *"}

# api:
#   default:
#     host: 127.0.0.1            # without api_key only loopback (unless --insecure)
#     port: 8000
#     api_key: change-me-to-a-long-random-string   # clients send it as X-API-Key
#     # prefix: /cheeto          # routes, /healthz and /openapi.json under /cheeto
#     # root_path: /api          # the path a reverse proxy strips before forwarding
#     # tls_cert: /etc/cheeto/tls/api.crt   # both or neither: serve HTTPS
#     # tls_key: /etc/cheeto/tls/api.key

# hippo:
#   base_url: https://hippo.example.org
#   api_key: change-me
#   site_aliases: {caesfarm: farm}

# ucdiam:
#   base_url: https://iet-ws.ucdavis.edu/api/iam
#   api_key: change-me
"""

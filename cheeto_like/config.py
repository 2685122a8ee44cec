"""Configuration: one YAML file, with profiles for the per-environment sections.

``ldap``, ``mongo``, ``daemon`` and ``api`` are maps of profile name -> block; the chosen
profile (``--profile``/``CHEETO_PROFILE``) falls back to ``default``. ``hippo``,
``ucdiam``, ``mail`` and ``alerts`` are global. Every block forbids unknown keys, so a
typo is an error that names the key instead of a silently ignored setting.
"""

from __future__ import annotations

import os
import re
from datetime import date
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


def xdg_state_home() -> Path:
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")


def xdg_data_home() -> Path:
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")


def default_config_path() -> Path:
    return xdg_config_home() / "cheeto" / "config.yaml"


class Block(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EmbeddedStoreConfig(Block):
    """The embedded store: an nx-27017 server on SQLite files in ``path`` (a directory).

    ``listen: unix`` (the default) serves a Unix socket inside ``path`` (0700), so only
    its owner can connect and the data directory is the server's identity. ``listen:
    tcp`` (containers) serves ``host:port`` and requires a credential: ``token``, else
    ``$CHEETO_STORE_TOKEN``, else ``token_file`` (default ``<path>/store.token``, made
    0600 by the server on first start). ``lock_timeout_seconds`` bounds how long a
    command waits for another client's transaction before it fails.
    """

    path: UserPath = Field(default_factory=lambda: xdg_data_home() / "cheeto" / "store")
    listen: Literal["unix", "tcp"] = "unix"
    host: str = "127.0.0.1"
    port: int = Field(default=27117, ge=1, le=65535)
    token: SecretStr | None = None
    token_file: UserPath | None = None
    lock_timeout_seconds: float = Field(default=60.0, gt=0)

    @field_validator("path")
    @classmethod
    def _directory(cls, value: Path) -> Path:
        """A file here would only fail later, inside the server, as an internal error."""
        for candidate in (value, *value.parents):  # the nearest existing one must be a dir
            if candidate.exists():
                if not candidate.is_dir():
                    raise ValueError(f"{candidate} exists and is not a directory")
                break
        return value


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

    @field_validator("uri")
    @classmethod
    def _uri_shape(cls, value: str | None) -> str | None:
        """The cheap shape check; ``store.connect`` reports what pymongo still refuses."""
        if value is not None and not value.startswith(("mongodb://", "mongodb+srv://")):
            raise ValueError("must start with mongodb:// or mongodb+srv://")
        return value

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
    # removals (entries, memberUid/member/sshPublicKey values) per site in any 24 hours,
    # across runs (null: no budget); the per-run cap is --max-deletions
    max_deletions_per_day: int | None = Field(default=200, ge=0)
    lease_seconds: float = Field(default=60.0, ge=1)  # renewed while the run lives

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


def _http_url(value: str) -> str:
    value = value.strip().rstrip("/")
    if not re.match(r"^https?://[^/\s]+(/\S*)?$", value):
        raise ValueError(f"{value!r} is not an http:// or https:// URL")
    return value


HttpUrl = Annotated[str, AfterValidator(_http_url)]


class HttpClientOptions(Block):
    """How an HTTP client talks to its service: one request's timeout, and how often a
    transient failure (timeout, connection error, 5xx, 429) is retried, with exponential
    backoff starting at ``retry_backoff_seconds``."""

    request_timeout_seconds: float = Field(default=30.0, gt=0)
    retries: int = Field(default=2, ge=0, le=10)
    retry_backoff_seconds: float = Field(default=1.0, ge=0)


class HippoSiteOptions(Block):
    """Per-site HiPPO behaviour (keyed by the local site name)."""

    grant_slurm: bool = False  # every new account here gets `slurm` access
    replace_ssh_keys: bool = False  # a new key replaces the user's other keys
    create_home: bool = True  # provision a home from the site's storage defaults


def _lower_keys(value: dict[str, str]) -> dict[str, str]:
    lowered: dict[str, str] = {}
    for key, site in value.items():
        low = key.strip().lower()
        if low in lowered and lowered[low] != site.strip().lower():
            raise ValueError(f"site alias {key!r} is given twice (case-insensitively) with "
                             "different sites")
        lowered[low] = site.strip().lower()
    return lowered


class HippoConfig(HttpClientOptions):
    """HiPPO, the account-request portal (``cheeto ng hippo …``, ``cheeto.hippo_process``).

    ``site_aliases`` maps HiPPO cluster names to site names; both it and ``Site.aliases``
    are matched case-insensitively. ``access_types`` maps HiPPO access types to access
    shorthands; an event asks for Slurm when one of its access types maps to ``slurm``
    or its metadata has ``slurm: true``.
    """

    base_url: HttpUrl
    api_key: SecretStr
    site_aliases: Annotated[dict[str, str], AfterValidator(_lower_keys)] = Field(
        default_factory=dict)
    max_tries: int = Field(default=3, ge=1)
    access_types: dict[str, str] = Field(default_factory=lambda: {
        "OpenOnDemand": "ondemand", "SshKey": "login-ssh"})
    sites: dict[str, HippoSiteOptions] = Field(default_factory=dict)
    notify: bool = True  # e-mail the people an event concerns

    def site_options(self, site: str) -> HippoSiteOptions:
        return self.sites.get(site, HippoSiteOptions())


class IAMRefresh(Block):
    """Which user fields IAM facts overwrite. ``name`` renames the user (and their
    personal group) to the IAM login id, so it is off unless asked for."""

    name: bool = False
    email: bool = True
    fullname: bool = True


class IAMConfig(HttpClientOptions):
    """UC Davis IAM (``cheeto ng iam …``, ``cheeto.iam_sync``). The key travels in the
    ``api_key_header`` header, never in a URL.

    A user missing from IAM for ``grace_days`` (0: at the first miss; the default 1 means
    the next nightly run) is set to offboarding, and deactivated by the reaper
    ``expiry_offset_days`` later unless they reappear first.
    """

    base_url: HttpUrl
    api_key: SecretStr
    api_key_header: str = Field(default="X-API-Key", pattern=r"^[A-Za-z0-9-]{1,64}$")
    api_version: str | None = "1.0"  # sent as v=<version>
    grace_days: int = Field(default=1, ge=0, le=36500)  # a century: no date overflow
    expiry_offset_days: int = Field(default=30, ge=0, le=36500)
    refresh: IAMRefresh = Field(default_factory=IAMRefresh)


def _address(value: str) -> str:
    value = value.strip()
    if not re.fullmatch(r"[^@\s<>]+@[^@\s<>]+\.[^@\s<>]+", value):
        raise ValueError(f"{value!r} is not an e-mail address")
    return value


class SMTPConfig(Block):
    """An SMTP relay. ``ssl`` is implicit TLS (port 465); ``starttls`` upgrades a plain
    connection. ``username``/``password`` log in (only over TLS unless ``allow_plain_auth``)."""

    host: str = "localhost"
    port: int = Field(default=25, ge=1, le=65535)
    starttls: bool = False
    ssl: bool = False
    username: str | None = None
    password: SecretStr | None = None
    allow_plain_auth: bool = False
    timeout_seconds: float = Field(default=30.0, gt=0)
    ca_file: UserPath | None = None

    @model_validator(mode="after")
    def _consistent(self) -> SMTPConfig:
        if self.ssl and self.starttls:
            raise ValueError("choose ssl (implicit TLS) or starttls, not both")
        if (self.username is None) != (self.password is None):
            raise ValueError("username and password go together")
        if self.username and not (self.ssl or self.starttls or self.allow_plain_auth):
            raise ValueError("SMTP login without ssl or starttls would send the password in "
                             "clear; enable one (or allow_plain_auth for a local relay)")
        return self


class MailConfig(Block):
    """Where e-mail goes: ``transport: smtp`` (the ``smtp`` block) or ``hippo`` (HiPPO's
    notify endpoint, using the ``hippo`` section). ``enabled: false`` records every
    e-mail in History as not sent, without sending."""

    enabled: bool = True
    transport: Literal["smtp", "hippo"] = "smtp"
    from_address: Annotated[str, AfterValidator(_address)] = "hpc-help@ucdavis.edu"
    reply_to: Annotated[str, AfterValidator(_address)] | None = None
    smtp: SMTPConfig = Field(default_factory=SMTPConfig)
    # what the templates link to
    support_address: str = "hpc-help@ucdavis.edu"
    docs_url: str = "https://docs.hpc.ucdavis.edu"


class AlertsConfig(Block):
    """Operator alerts: a digest of failed or refused sync runs and failed or stuck daemon
    tasks, e-mailed to ``to`` (through the ``mail`` transport)."""

    to: list[Annotated[str, AfterValidator(_address)]] = Field(min_length=1)
    subject_prefix: str = "[cheeto]"
    stuck_after_minutes: int = Field(default=120, ge=1)  # a task running longer is stuck
    lookback_hours: int = Field(default=24, ge=1)  # how far the first digest looks back


class AuditConfig(Block):
    """The weekly access audit's digest: e-mailed to ``to`` (through the ``mail``
    transport) and, when ``webhook_url`` is set, posted to a Slack-compatible chat
    incoming webhook (``{"text": ...}``). The webhook URL is a credential: it comes from
    here (a file only admins read) or ``$CHEETO_AUDIT_WEBHOOK_URL``, never the command
    line. API keys older than ``api.key_rotation_days`` or unused for
    ``key_unused_days`` are findings."""

    to: list[Annotated[str, AfterValidator(_address)]] = Field(default_factory=list)
    subject_prefix: str = "[cheeto audit]"
    webhook_url: SecretStr | None = None
    webhook_timeout_seconds: float = Field(default=10.0, gt=0, le=120)
    key_unused_days: int = Field(default=90, ge=1, le=3650)


class BrokerSSLConfig(Block):
    """TLS to the broker (``amqps://``): the CA to verify it, and an optional client cert."""

    ca_file: UserPath | None = None
    cert_file: UserPath | None = None
    key_file: UserPath | None = None
    cert_reqs: Literal["none", "optional", "required"] = "required"


_CRON_FIELD = re.compile(r"^[A-Za-z0-9*/,-]+$")
CRON_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")


def check_schedule(value: Any) -> int | float | str | None:
    """A number of seconds (> 0) or a 5-field crontab string; None = not scheduled.

    Only the shape of a crontab is checked here (config loading must stay cheap); the
    daemon parses each field when it builds the beat schedule.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError("a schedule is a number of seconds or a 5-field crontab string")
    if isinstance(value, int | float):
        if value <= 0:
            raise ValueError(f"an interval must be more than 0 seconds (got {value})")
        return value
    if isinstance(value, str):
        fields = value.split()
        if len(fields) != len(CRON_FIELDS) or not all(_CRON_FIELD.match(f) for f in fields):
            raise ValueError(f"{value!r} is not a 5-field crontab ({' '.join(CRON_FIELDS)}); "
                             "give a number for an interval in seconds")
        return " ".join(fields)
    raise ValueError("a schedule is a number of seconds or a 5-field crontab string")


class TaskBlock(Block):
    """What every daemon task block has. A task whose block is absent, null or has
    ``enabled: false`` is disabled: enqueue refuses it, beat does not schedule it and a
    queued run fails. A block without ``schedule`` runs only when enqueued."""

    enabled: bool = True
    schedule: int | float | str | None = None

    @field_validator("schedule", mode="before")
    @classmethod
    def _schedule(cls, value: Any) -> int | float | str | None:
        return check_schedule(value)


class SiteTaskBlock(TaskBlock):
    """A per-site task: one run (and one beat entry) per site; ``sites`` overrides
    ``daemon.sites`` for this task."""

    sites: list[str] | None = None


class SlurmSyncTask(SiteTaskBlock):
    """``cheeto.slurm_sync``: runs on the site's head node (queue ``slurm.<site>``)."""

    apply: bool = True
    sudo: bool = False
    max_deletions: int | None = Field(default=50, ge=0)  # null: no cap
    timeout_seconds: float = Field(default=60.0, gt=0)  # each sacctmgr call
    sacctmgr: str = Field(default="sacctmgr", min_length=1)  # name on PATH, or a path


class UsageCollectTask(SiteTaskBlock):
    """``cheeto.usage_collect``: read finished jobs from sacct into the usage ledger; runs
    on the site's head node (queue ``slurm.<site>``)."""

    sacct: str = Field(default="sacct", min_length=1)  # name on PATH, or a path
    timeout_seconds: float = Field(default=300.0, gt=0)
    notify: bool = True  # then send the quota threshold notices (needs the mail section)


class LDAPSyncTask(SiteTaskBlock):
    """``cheeto.ldap_sync``: a whole-site LDAP sync (the ``ldap:`` section says where)."""

    full: bool = False  # check every record, not only those changed since the last run
    # with ``full: false``: run a full check when the last full one at the site is older
    # than this (incremental runs skip hand-made drift in LDAP; this bounds how long it
    # can last without a second schedule). null: never
    full_every_hours: float | None = Field(default=24.0, gt=0)
    prune: bool = True  # also delete entries the store no longer has
    force: bool = False  # rewrite entries even when they match
    max_deletions: int | None = Field(default=50, ge=0)  # null: no cap
    concurrency: int = Field(default=1, ge=1, le=64)  # LDAP writes in flight


class SympaTask(SiteTaskBlock):
    """``cheeto.sympa_export``: ``<output_dir>/<site>.txt``, written atomically."""

    output_dir: UserPath
    ignore: list[str] | None = None  # default: the export's built-in ignore list


class PuppetSyncTask(SiteTaskBlock):
    """``cheeto.puppet_sync``: commit the site's legacy YAML and keys to a puppet clone."""

    repo: UserPath
    base_branch: str = Field(default="main", min_length=1)
    push: bool = True
    git_timeout_seconds: float = Field(default=60.0, gt=0)


class HippoTask(TaskBlock):
    """``cheeto.hippo_process`` (block ``hippo``; the ``hippo`` section says where)."""

    post_back: bool = True  # tell HiPPO each event's final status
    notify: bool = True  # send the account e-mails (needs the mail section)


class IAMSyncTask(TaskBlock):
    """``cheeto.iam_sync`` (block ``iam_sync``; the ``ucdiam`` section says where)."""

    concurrency: int = Field(default=1, ge=1, le=64)
    types: list[Literal["user", "admin"]] | None = None  # default: both
    max_users: int | None = Field(default=None, ge=1)
    include_inactive: bool = False  # also query inactive/disabled users
    notify: bool = True  # warn offboarding users, tell restored ones


class ReapTask(TaskBlock):
    """``cheeto.reap`` (block ``reap``): deactivate offboarded users past their expiry."""

    notify: bool = True  # tell deactivated users


class AlertDigestTask(TaskBlock):
    """``cheeto.alert_digest`` (block ``alerts``; the ``alerts`` section says to whom)."""


class ClusterMonitorTask(SiteTaskBlock):
    """``cheeto.cluster_monitor``: stalled jobs and nodes down too long, on the site's head
    node (queue ``slurm.<site>``); each new finding reaches the operator digest once."""

    pending_over_hours: float = Field(default=24.0, ge=0)
    down_over_hours: float = Field(default=1.0, ge=0)
    sinfo: str = Field(default="sinfo", min_length=1)  # name on PATH, or a path
    squeue: str = Field(default="squeue", min_length=1)
    timeout_seconds: float = Field(default=30.0, gt=0)


class AuditTask(TaskBlock):
    """``cheeto.audit`` (block ``audit``): the weekly access audit, its digest mailed to
    ``audit.to`` and posted to ``audit.webhook_url`` (the ``audit`` section)."""

    sites: list[str] | None = None  # default: every site
    slurm: bool = True  # compare slurmdbd (needs sacctmgr where the hub runs)
    sacctmgr: str = Field(default="sacctmgr", min_length=1)
    ldap: bool = True  # compare LDAP (when the ldap section exists)


class RequestEscalateTask(TaskBlock):
    """``cheeto.request_escalate`` (block ``requests``): mark requests past their SLA as
    escalated, once each, so the next operator-alert digest lists them."""


class DaemonTasks(Block):
    """One block per task; absent means disabled."""

    slurm_sync: SlurmSyncTask | None = None
    usage_collect: UsageCollectTask | None = None
    ldap_sync: LDAPSyncTask | None = None
    sympa: SympaTask | None = None  # the sympa_export task
    puppet_sync: PuppetSyncTask | None = None
    hippo: HippoTask | None = None  # the hippo_process task
    iam_sync: IAMSyncTask | None = None
    reap: ReapTask | None = None
    alerts: AlertDigestTask | None = None  # the alert_digest task
    requests: RequestEscalateTask | None = None  # the request_escalate task
    cluster_monitor: ClusterMonitorTask | None = None
    audit: AuditTask | None = None  # the audit task


class DaemonConfig(Block):
    """Celery: the broker, the sites, the task blocks (``cheeto daemon …``).

    Results go to the ``celery_taskmeta`` collection of the ``mongo`` database and expire
    after ``result_expires`` seconds. ``task_time_limit`` is the hard limit of one run
    (a soft limit fires a little earlier).
    """

    broker_url: str = "amqp://guest:guest@127.0.0.1:5672//"
    broker_use_ssl: BrokerSSLConfig | None = None
    broker_transport_options: dict[str, Any] = Field(default_factory=dict)
    sites: list[str] = Field(default_factory=list)
    author: str = Field(default="cheeto-daemon", min_length=1)
    timezone: str = "America/Los_Angeles"
    beat_schedule_filename: UserPath = Path("/var/lib/cheeto/celerybeat-schedule")
    task_time_limit: int = Field(default=3600, ge=10)
    result_expires: int = Field(default=86400, gt=0)
    # Flower's basic auth, user:password[,user:password]; $FLOWER_BASIC_AUTH wins
    flower_basic_auth: SecretStr | None = None
    tasks: DaemonTasks = Field(default_factory=DaemonTasks)

    @field_validator("tasks", mode="before")
    @classmethod
    def _no_tasks(cls, value: Any) -> Any:
        return {} if value is None else value  # a bare `tasks:` line: nothing enabled

    @field_validator("broker_url")
    @classmethod
    def _broker_url(cls, value: str) -> str:
        if not re.match(r"^[a-z][a-z0-9+.-]*://", value):  # (never echo: it holds a password)
            raise ValueError("not a broker URL (amqp://user:password@host:port/vhost, or "
                             "amqps://…)")
        return value

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r}") from None
        return value

    @model_validator(mode="after")
    def _ssl_needs_amqps(self) -> DaemonConfig:
        if self.broker_use_ssl is not None and not self.broker_url.startswith("amqps://"):
            raise ValueError("broker_use_ssl is set but broker_url is not amqps://")
        return self


def _url_path(value: str) -> str:
    """``cheeto/`` -> ``/cheeto``; empty stays empty (a URL path prefix)."""
    value = value.strip().strip("/")
    if not value:
        return ""
    if not re.fullmatch(r"[A-Za-z0-9._~!$&'()*+,;=:@%/-]+", value) or "//" in value:
        raise ValueError(f"{value!r} is not a URL path")
    return f"/{value}"


# the API's only credential: long enough not to be guessed
MIN_API_KEY_LENGTH = 32


class ApiConfig(Block):
    """The REST API (``cheeto daemon api``).

    Without ``api_key`` (at least 32 characters) the API would be open, so
    ``cheeto daemon api`` refuses to start unless given ``--insecure``. ``prefix`` is where
    the routes (and ``/healthz``, ``/openapi.json``, ``/docs``) are mounted; ``root_path``
    is the path a reverse proxy strips before forwarding. ``tls_cert`` and ``tls_key``
    (both or neither) serve HTTPS. An export is rebuilt when its site's data changes
    or after ``cache_seconds`` (0: never cached), serving the previous body meanwhile.
    """

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    api_key: SecretStr | None = None
    root_path: Annotated[str, AfterValidator(_url_path)] = ""
    prefix: Annotated[str, AfterValidator(_url_path)] = ""
    tls_cert: UserPath | None = None
    tls_key: UserPath | None = None
    # an export body is rebuilt when its site's data generation moves (an operation
    # touched the site) or after cache_seconds, in the background while the previous body
    # is served; concurrent first requests share one build. 0 disables (every request
    # queries the store). Generations are read in the background at most every
    # generation_poll_seconds while requests come (0: every request reads them).
    cache_seconds: float = Field(default=30.0, ge=0, le=3600)
    generation_poll_seconds: float = Field(default=1.0, ge=0, le=60)
    # sign-in and machine keys (auth/): the HS256 signing key file is created 0600 on
    # first use (default <XDG state>/cheeto/jwt.key); login_groups, when set, admits only
    # their members; failed logins per user and per address are limited in memory.
    jwt_key_file: UserPath | None = None
    # the puppet routes take only managed keys (`ng apikey`, scope puppet:read) or an
    # operator's token; api_key is then not needed (and still accepted, deprecated, if set)
    managed_keys_only: bool = False
    token_issuer: str = Field(default="cheeto", min_length=1)
    token_audience: str = Field(default="cheeto-api", min_length=1)
    token_ttl_hours: float = Field(default=8.0, gt=0, le=24 * 90)
    login_groups: list[str] = Field(default_factory=list)
    login_max_failures: int = Field(default=5, ge=1, le=1000)
    login_window_seconds: float = Field(default=300.0, gt=0, le=86400)
    key_rotation_days: int = Field(default=90, ge=1, le=3650)
    key_overlap_hours: float = Field(default=24.0, ge=0, le=24 * 30)
    key_use_flush_seconds: float = Field(default=30.0, gt=0, le=3600)

    @field_validator("api_key")
    @classmethod
    def _usable_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value().strip()) < MIN_API_KEY_LENGTH:
            raise ValueError(f"api_key is shorter than {MIN_API_KEY_LENGTH} characters "
                             "(try: openssl rand -hex 24)")
        return value

    @model_validator(mode="after")
    def _tls_pair(self) -> ApiConfig:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together (set both or neither)")
        return self


class SlurmConfig(Block):
    """How the Slurm reconciler behaves at every site (``ng slurm sync``, the daemon)."""

    # removals (accounts, associations, coordinators, QOS dropped from associations) per
    # site in any 24 hours, across runs (null: no budget); the per-run cap is
    # --max-deletions / the task's max_deletions
    max_deletions_per_day: int | None = Field(default=200, ge=0)
    lease_seconds: float = Field(default=60.0, ge=1)  # renewed while the apply lives
    # users whose associations under the `root` account are left alone; any other user
    # under root can run jobs, so the sync removes them (README "Slurm")
    root_users: list[str] = Field(default_factory=lambda: ["root"])
    # accounts made outside cheeto that the sync leaves alone (with their users); every
    # other non-root account on the cluster is cheeto's, and one not in the store is deleted
    unmanaged_accounts: list[str] = Field(default_factory=list)


class UsageRate(Block):
    """Prices per normalised hour (CPU-hours; GPU-hours after the GPU-type factors)."""

    cpu_hour: float = Field(default=0.0, ge=0)
    gpu_hour: float = Field(default=0.0, ge=0)


class UsageConfig(Block):
    """Usage accounting at every site (``ng usage …``, the ``usage_collect`` task)."""

    overlap_minutes: float = Field(default=60.0, ge=0)  # each collect re-reads this much
    currency: str = Field(default="USD", min_length=1, max_length=8)
    # the optional rate card: site -> partition ('*': every other partition) -> prices
    rates: dict[str, dict[str, UsageRate]] = Field(default_factory=dict)
    # percent of a quota at which users (or an account's sponsors) get one notice
    thresholds: list[int] = Field(default_factory=lambda: [75, 90, 100], max_length=10)

    @field_validator("thresholds")
    @classmethod
    def _thresholds(cls, value: list[int]) -> list[int]:
        if any(not 1 <= t <= 1000 for t in value):
            raise ValueError("thresholds are percents between 1 and 1000")
        return sorted(set(value))


class RequestKindConfig(Block):
    """One request kind: its SLA target (``2d`` business days, ``4h`` business hours) and
    whether an operator approves after the group's sponsor."""

    sla: str = "2d"
    operator: bool = False

    @field_validator("sla")
    @classmethod
    def _sla(cls, value: str) -> str:
        from .sla import parse_target

        parse_target(value)
        return value


def _default_request_kinds() -> dict[str, RequestKindConfig]:
    return {"account": RequestKindConfig(), "join": RequestKindConfig(),
            "access": RequestKindConfig(operator=True),
            "quota": RequestKindConfig(operator=True),
            "storage": RequestKindConfig(sla="3d", operator=True)}


class RequestsConfig(Block):
    """The request queue (``ng request …``): the business calendar SLAs are counted in
    (``timezone``, ``workdays``, ``holidays``) and each kind's target and approvals
    (kinds left out keep their defaults)."""

    timezone: str = "UTC"
    workdays: list[str] = Field(default_factory=lambda: ["mon", "tue", "wed", "thu", "fri"])
    holidays: list[date] = Field(default_factory=list)
    kinds: dict[Literal["account", "join", "access", "quota", "storage"],
                RequestKindConfig] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _calendar(self) -> RequestsConfig:
        from .sla import Calendar

        Calendar.of(self.timezone, self.workdays, self.holidays)
        merged = _default_request_kinds() | dict(self.kinds)
        object.__setattr__(self, "kinds", merged)
        return self


class ClientConfig(Block):
    """Where ``cheeto login``/``me``/``usage``/``quota`` send their requests
    (``$CHEETO_API_URL`` wins); ``ca_file`` verifies a private CA's certificate."""

    url: str = Field(min_length=1)
    ca_file: UserPath | None = None
    timeout_seconds: float = Field(default=30.0, gt=0, le=600)


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


class _ConfigFile(BaseModel):
    """The file's shape: profiled sections are maps of profile -> block."""

    model_config = ConfigDict(extra="forbid")

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
        if chosen != DEFAULT_PROFILE:
            raise ConfigError(f"profile {chosen!r} is not defined: there is no config file "
                              f"({file_path})")
        return Config(path=None, profile=chosen)
    raw = _read_yaml(file_path)
    try:
        parsed = _ConfigFile.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"config {file_path}: {describe_validation_error(exc)}") from None
    _check_profile(parsed, chosen, file_path)
    picked: dict[str, Any] = {}
    for section in PROFILED_SECTIONS:
        blocks: dict[str, Any] = getattr(parsed, section)
        block = blocks.get(chosen, blocks.get(DEFAULT_PROFILE))
        if block is not None:
            picked[section] = block
    return Config(path=file_path, profile=chosen, hippo=parsed.hippo, ucdiam=parsed.ucdiam,
                  mail=parsed.mail, alerts=parsed.alerts, audit=parsed.audit,
                  slurm=parsed.slurm,
                  usage=parsed.usage, client=parsed.client,
                  requests=parsed.requests, **picked)


def _check_profile(parsed: _ConfigFile, chosen: str, file_path: Path) -> None:
    """A profile no section defines is a typo (``-p prod`` against a file without a
    ``prod`` block), not a request for the defaults: one line naming the known ones.
    Sections the profile does not define still fall back to ``default``."""
    defined = {name for section in PROFILED_SECTIONS for name in getattr(parsed, section)}
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


# The password runs to the *last* ``@`` of the URI (of each ``;``-separated failover URI):
# an unencoded ``@`` or ``/`` in a password must not leave its tail visible. Masking too
# much (an ``@`` in a query string) is harmless; masking too little is a leak.
_URI_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/;]*):(?P<pw>[^;]*)@",
                           re.IGNORECASE)
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
      listen: unix            # a socket in path (owner only); tcp for containers
      # host: 127.0.0.1       # tcp only, with a credential: token, $CHEETO_STORE_TOKEN
      # port: 27117           # or token_file (default <path>/store.token)

# slurm:                          # global: every site's Slurm sync
#   max_deletions_per_day: 200    # rolling 24 h removal budget per site (null: none)
#   lease_seconds: 60             # an apply's lease, renewed while it runs
#   root_users: [root]            # users left alone under account root (others: removed)
#   unmanaged_accounts: []        # accounts never touched (other unknown ones: deleted)

# usage:                          # global: usage accounting (ng usage, usage_collect)
#   overlap_minutes: 60           # each collect re-reads this much before the watermark
#   thresholds: [75, 90, 100]     # quota notices (once per threshold per period)
#   currency: USD
#   rates:                        # optional rate card: site -> partition ('*': the rest)
#     farm: {gpu: {cpu_hour: 0.01, gpu_hour: 0.5}, "*": {cpu_hour: 0.01}}

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
#     # max_deletions_per_day: 200    # rolling 24 h removal budget per site (null: none)
#     # lease_seconds: 60             # an applying run's lease, renewed while it runs

# daemon:
#   default:
#     broker_url: amqps://cheeto:secret@broker.example.org:5671//
#     # broker_use_ssl: {ca_file: /etc/ssl/certs/broker-ca.pem, cert_reqs: required}
#     #   (also cert_file, key_file for a client certificate)
#     sites: [farm]                   # the per-site tasks' default site list
#     author: cheeto-daemon           # History/SyncRun author of scheduled runs
#     # timezone: America/Los_Angeles # crontab schedules are read in this zone
#     # beat_schedule_filename: /var/lib/cheeto/celerybeat-schedule
#     # task_time_limit: 3600         # hard limit of one run (soft: a little less)
#     # result_expires: 86400         # celery_taskmeta rows are kept this long
#     # flower_basic_auth: admin:secret   # Flower's login ($FLOWER_BASIC_AUTH wins)
#     tasks:                          # absent, null or enabled: false = disabled
#       # schedule: a number = every N seconds; a string = a 5-field crontab;
#       # no schedule = only when enqueued (cheeto daemon enqueue TASK --site S)
#       slurm_sync:                   # runs on queue slurm.<site> (the site worker)
#         schedule: 600
#         # sites: [farm]             # overrides daemon.sites for this task
#         # apply: true
#         # sudo: false
#         # max_deletions: 50         # null: no cap
#         # timeout_seconds: 60       # each sacctmgr call
#         # sacctmgr: sacctmgr
#       # usage_collect:             # sacct -> usage ledger, on queue slurm.<site>
#       #   schedule: 900
#       #   sacct: sacct
#       #   timeout_seconds: 300
#       #   notify: true              # then the quota notices (needs the mail section)
#       # cluster_monitor:           # stalled jobs, nodes down; on queue slurm.<site>
#       #   schedule: 1800
#       #   pending_over_hours: 24
#       #   down_over_hours: 1
#       # audit:                     # weekly access audit (needs the audit section)
#       #   schedule: "0 6 * * 1"
#       # requests:                  # request_escalate: breaches -> the alerts digest, once
#       #   schedule: 3600
#       ldap_sync:
#         schedule: "*/15 * * * *"
#         # full: false
#         # prune: true
#         # force: false
#         # max_deletions: 50
#         # concurrency: 1
#       # sympa:                      # the sympa_export task
#       #   schedule: "0 3 * * *"
#       #   output_dir: /srv/sympa/lists   # writes <output_dir>/<site>.txt
#       #   ignore: [hpc-help@ucdavis.edu]
#       # puppet_sync:
#       #   schedule: 3600
#       #   repo: /var/lib/cheeto/puppet.hpc    # a clone of the puppet repository
#       #   base_branch: main
#       #   push: true

# api:
#   default:
#     host: 127.0.0.1
#     port: 8000
#     # required (32+ characters; the API refuses to start without it unless --insecure);
#     # clients send it as X-API-Key
#     api_key: change-me-to-a-random-string-of-32-characters-or-more
#     # prefix: /cheeto          # routes, /healthz and /openapi.json under /cheeto
#     # root_path: /api          # the path a reverse proxy strips before forwarding
#     # tls_cert: /etc/cheeto/tls/api.crt   # both or neither: serve HTTPS
#     # tls_key: /etc/cheeto/tls/api.key
#     # cache_seconds: 30        # exports rebuilt on a change, else at most every 30 s
#     # sign-in and API keys (/api/v1; README "Sign-in, roles and the API"):
#     # managed_keys_only: true  # puppet uses `ng apikey` keys; api_key no longer needed
#     # jwt_key_file: /var/lib/cheeto/jwt.key   # default $XDG_STATE_HOME/cheeto/jwt.key
#     # token_ttl_hours: 8
#     # login_groups: [hpc-staff]  # only members may sign in (default: every user)
#     # login_max_failures: 5      # per user and per address, in login_window_seconds
#     # login_window_seconds: 300
#     # key_rotation_days: 90      # `ng apikey audit` flags older secrets
#     # key_overlap_hours: 24      # a rotated key's old secret keeps working this long

# client:                        # where `cheeto login/me/usage/quota` go ($CHEETO_API_URL wins)
#   url: https://cheeto.example.org:8000
#   # ca_file: /etc/cheeto/tls/ca.pem

# hippo:                         # the HiPPO account-request portal
#   base_url: https://hippo.example.org
#   api_key: change-me            # sent as X-API-Key
#   site_aliases: {caesfarm: farm}   # HiPPO cluster -> site (any case; Site.aliases too)
#   max_tries: 3                  # a failing event is retried this often, then Failed
#   # request_timeout_seconds: 30
#   # retries: 2                  # extra attempts on timeouts, connection errors and 5xx
#   # retry_backoff_seconds: 1    # doubled after each attempt
#   # access_types: {OpenOnDemand: ondemand, SshKey: login-ssh}
#   # notify: true                # e-mail the people an event concerns (see mail:)
#   # sites:                      # per site: grant_slurm (false), replace_ssh_keys (false),
#   #   farm: {grant_slurm: true} #   create_home (true)

# ucdiam:                         # UC Davis IAM: identity facts and offboarding
#   base_url: https://iet-ws.ucdavis.edu/api/iam
#   api_key: change-me
#   # api_key_header: X-API-Key   # the key goes in this header, never in a URL
#   # api_version: "1.0"
#   # grace_days: 1               # missing this long -> offboarding (0: at the first miss)
#   # expiry_offset_days: 30      # offboarding -> deactivated (by the reaper) after this
#   # request_timeout_seconds: 30
#   # retries: 2
#   # refresh: {name: false, email: true, fullname: true}   # fields IAM facts overwrite

# mail:
#   transport: smtp               # or hippo (HiPPO's notify endpoint)
#   from_address: hpc-help@ucdavis.edu
#   # reply_to: hpc-help@ucdavis.edu
#   # enabled: true               # false: record e-mails in History without sending
#   smtp:
#     host: smtp.example.org
#     port: 587
#     starttls: true              # or ssl: true (port 465)
#     # username: cheeto
#     # password: secret
#     # timeout_seconds: 30
#     # ca_file: /etc/ssl/certs/smtp-ca.pem

# alerts:                         # operator digest: failed/refused syncs, failed/stuck tasks
#   to: [hpc-ops@example.org]
#   # subject_prefix: "[cheeto]"
#   # stuck_after_minutes: 120
#   # lookback_hours: 24          # how far the first digest looks back

# requests:                       # the request queue's SLA calendar (ng request ...)
#   timezone: America/Los_Angeles
#   # workdays: [mon, tue, wed, thu, fri]
#   # holidays: [2026-12-25]
#   # kinds: {quota: {sla: 2d, operator: true}}   # account, join, access, quota, storage
# audit:                          # weekly access audit digest (ng audit run, audit task)
#   to: [hpc-security@example.org]
#   # webhook_url: https://chat.example.org/hooks/...   # or $CHEETO_AUDIT_WEBHOOK_URL
#   # key_unused_days: 90
"""

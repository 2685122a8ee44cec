"""Configuration: one YAML file, with profiles for the per-environment sections.

``ldap``, ``mongo``, ``daemon`` and ``api`` are maps of profile name -> block; the chosen
profile (``--profile``/``CHEETO_PROFILE``) falls back to ``default``. ``hippo``,
``ucdiam``, ``mail`` and ``alerts`` are global. Every block forbids unknown keys, so a
typo is an error that names the key instead of a silently ignored setting.

One module per section (``store``, ``ldap``, ``daemon`` + ``tasks``, ``api``, ``people``,
``mail``, ``slurm``, ``usage``, ``requests``); ``load`` reads the file. Callers import from
``cheeto_like.config``, which re-exports every name they use.
"""

from __future__ import annotations

from .api import MIN_API_KEY_LENGTH, ApiConfig, ClientConfig
from .base import Block, UserPath
from .daemon import BrokerSSLConfig, DaemonConfig
from .display import MASK, config_for_display, mask_uri
from .ldap import LDAPConfig
from .load import (
    Config,
    _read_yaml,
    load_config,
    resolve_config_path,
    resolve_profile,
)
from .mail import AlertsConfig, AuditConfig, MailConfig, SMTPConfig
from .metrics import MetricsConfig
from .offboarding import OffboardingConfig, SiteOffboarding
from .paths import (
    DEFAULT_PROFILE,
    PROFILED_SECTIONS,
    default_config_path,
    runtime_directory,
    state_directory,
    xdg_config_home,
    xdg_data_home,
    xdg_state_home,
)
from .people import (
    HippoConfig,
    HippoSiteOptions,
    HttpClientOptions,
    HttpUrl,
    IAMConfig,
    IAMRefresh,
)
from .requests import RequestKindConfig, RequestsConfig
from .retention import RetentionConfig
from .skeleton import SKELETON
from .slurm import SlurmConfig
from .store import EmbeddedStoreConfig, MongoConfig
from .tasks import (
    CRON_FIELDS,
    AlertDigestTask,
    AuditTask,
    ClusterMonitorTask,
    DaemonTasks,
    HippoTask,
    IAMSyncTask,
    LDAPSyncTask,
    PuppetSyncTask,
    ReapTask,
    RequestEscalateTask,
    RetentionTask,
    SiteTaskBlock,
    SlurmSyncTask,
    SympaTask,
    TaskBlock,
    UsageCollectTask,
    check_schedule,
)
from .usage import UsageConfig, UsageRate

__all__ = [
    "CRON_FIELDS",
    "DEFAULT_PROFILE",
    "MASK",
    "MIN_API_KEY_LENGTH",
    "PROFILED_SECTIONS",
    "SKELETON",
    "AlertDigestTask",
    "AlertsConfig",
    "ApiConfig",
    "AuditConfig",
    "AuditTask",
    "Block",
    "BrokerSSLConfig",
    "ClientConfig",
    "ClusterMonitorTask",
    "Config",
    "DaemonConfig",
    "DaemonTasks",
    "EmbeddedStoreConfig",
    "HippoConfig",
    "HippoSiteOptions",
    "HippoTask",
    "HttpClientOptions",
    "HttpUrl",
    "IAMConfig",
    "IAMRefresh",
    "IAMSyncTask",
    "LDAPConfig",
    "LDAPSyncTask",
    "MailConfig",
    "MetricsConfig",
    "MongoConfig",
    "OffboardingConfig",
    "PuppetSyncTask",
    "ReapTask",
    "RequestEscalateTask",
    "RequestKindConfig",
    "RequestsConfig",
    "RetentionConfig",
    "RetentionTask",
    "SMTPConfig",
    "SiteOffboarding",
    "SiteTaskBlock",
    "SlurmConfig",
    "SlurmSyncTask",
    "SympaTask",
    "TaskBlock",
    "UsageCollectTask",
    "UsageConfig",
    "UsageRate",
    "UserPath",
    "_read_yaml",
    "check_schedule",
    "config_for_display",
    "default_config_path",
    "load_config",
    "mask_uri",
    "resolve_config_path",
    "resolve_profile",
    "runtime_directory",
    "state_directory",
    "xdg_config_home",
    "xdg_data_home",
    "xdg_state_home",
]

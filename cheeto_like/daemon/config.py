"""The daemon's task table and the rules that enqueue, beat and the task bodies share.

Pure (no Celery import), so the CLI can refuse a bad request before it touches a broker.

- A task is named ``slurm_sync`` (what ``cheeto daemon enqueue`` takes) and registered
  as ``cheeto.slurm_sync``; its config block lives under ``daemon.tasks.<block>``.
- A task whose block is absent, null or ``enabled: false`` is *disabled*: enqueue
  refuses it, beat does not schedule it, and a run that finds it disabled fails with the
  same message (no AttributeError).
- ``slurm_sync`` runs on ``slurm.<site>`` (the site's head node); everything else on
  ``cheeto`` (the hub).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import Config, DaemonConfig, SiteTaskBlock, TaskBlock
from ..errors import ConfigError, InvalidInput

HUB_QUEUE = "cheeto"
SITE_QUEUE_PREFIX = "slurm."
TASK_PREFIX = "cheeto."
TASKMETA_COLLECTION = "celery_taskmeta"  # in the application database
NO_SITE = "*"  # the site a singleton (not per-site) task's lease, body and status row get


class TaskDisabled(ConfigError):
    """The task's config block is absent, null or disabled (exit code 2)."""


@dataclass(frozen=True)
class TaskSpec:
    name: str  # what enqueue takes: slurm_sync
    block: str  # the key under daemon.tasks
    entry: str  # the beat entry prefix: slurm-sync -> slurm-sync-<site>
    per_site: bool = True
    on_site_queue: bool = False  # runs on slurm.<site> instead of the hub
    needs: tuple[str, ...] = ()  # other config sections it cannot run without

    @property
    def celery_name(self) -> str:
        return f"{TASK_PREFIX}{self.name}"

    def queue(self, site: str | None) -> str:
        if self.on_site_queue:
            if not site:
                raise InvalidInput(f"{self.name} needs a site (it runs on slurm.<site>)")
            return site_queue(site)
        return HUB_QUEUE


TASKS: dict[str, TaskSpec] = {spec.name: spec for spec in (
    TaskSpec("slurm_sync", "slurm_sync", "slurm-sync", on_site_queue=True),
    TaskSpec("ldap_sync", "ldap_sync", "ldap-sync", needs=("ldap",)),
    TaskSpec("sympa_export", "sympa", "sympa-export"),
    TaskSpec("puppet_sync", "puppet_sync", "puppet-sync"),
    TaskSpec("hippo_process", "hippo", "hippo-process", per_site=False, needs=("hippo",)),
    TaskSpec("iam_sync", "iam_sync", "iam-sync", per_site=False, needs=("ucdiam",)),
    TaskSpec("reap", "reap", "reap-offboarded", per_site=False),
    TaskSpec("alert_digest", "alerts", "alert-digest", per_site=False,
             needs=("alerts", "mail")),
    TaskSpec("usage_collect", "usage_collect", "usage-collect", on_site_queue=True),
    TaskSpec("request_escalate", "requests", "request-escalate", per_site=False),
    TaskSpec("cluster_monitor", "cluster_monitor", "cluster-monitor", on_site_queue=True),
    TaskSpec("audit", "audit", "weekly-audit", per_site=False, needs=("audit",)),
    TaskSpec("retention", "retention", "retention", per_site=False),
)}
BY_CELERY_NAME = {spec.celery_name: spec for spec in TASKS.values()}


def site_queue(site: str) -> str:
    return f"{SITE_QUEUE_PREFIX}{site}"


def lookup(name: str) -> TaskSpec:
    """``slurm_sync`` or ``cheeto.slurm_sync``; anything else is bad input."""
    spec = TASKS.get(name) or BY_CELERY_NAME.get(name)
    if spec is None:
        raise InvalidInput(f"unknown task {name!r} (known: {', '.join(TASKS)})")
    return spec


def daemon_config(config: Config) -> DaemonConfig:
    if config.daemon is None:
        raise ConfigError(f"no daemon section in the config for profile {config.profile!r} "
                          "(see `cheeto config write`)")
    return config.daemon


def task_block(config: Config, spec: TaskSpec) -> TaskBlock:
    """The task's block, or ``TaskDisabled`` saying exactly why there is none."""
    tasks = daemon_config(config).tasks
    block: TaskBlock | None = getattr(tasks, spec.block)
    where = f"daemon.tasks.{spec.block}"
    if block is None:
        if spec.block in tasks.model_fields_set:
            why = f"{where} is empty (null); write `{spec.block}: {{}}` for the defaults"
        else:
            why = f"the config (profile {config.profile!r}) has no {where} block"
        raise TaskDisabled(f"task {spec.name} is disabled: {why}")
    if not block.enabled:
        raise TaskDisabled(f"task {spec.name} is disabled: {where} has enabled: false")
    for section in spec.needs:
        if getattr(config, section) is None:
            raise TaskDisabled(f"task {spec.name} is disabled: it needs the {section} section, "
                               f"which the config (profile {config.profile!r}) lacks")
    return block


def task_sites(config: Config, spec: TaskSpec, block: TaskBlock,
               given: list[str] | None = None) -> list[str]:
    """The sites to run on: those given, else the task's ``sites``, else ``daemon.sites``
    (in order, without repeats); none at all is bad input."""
    if not spec.per_site:
        if given:
            raise InvalidInput(f"{spec.name} is not a per-site task; drop --site")
        return []
    override = block.sites if isinstance(block, SiteTaskBlock) else None
    chosen = given or override or daemon_config(config).sites
    if not chosen:
        raise InvalidInput(f"{spec.name} needs a site: pass --site, or set daemon.sites or "
                           f"daemon.tasks.{spec.block}.sites")
    return list(dict.fromkeys(chosen))


def enabled_tasks(config: Config) -> dict[str, TaskBlock]:
    """Every task that is not disabled, by name."""
    found = {}
    for spec in TASKS.values():
        try:
            found[spec.name] = task_block(config, spec)
        except TaskDisabled:
            continue
    return found

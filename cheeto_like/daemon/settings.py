"""Every Celery setting the config decides, and a bare app made from them.

Apart from ``app.py`` (which registers the tasks) so that a task body that sends on
another queue (the weekly audit asks each site's head node for its Slurm findings) makes
its sending app here, without importing the task registry it runs inside: what sends
needs the broker, the result backend and the routes, never the task bodies. The
``before_task_publish`` stamp is a Celery signal, connected once per process by
``register_tasks``, so a bare app's messages carry it too.

The settings:

- JSON only; ``worker_concurrency=1`` and prefetch 1 (syncs never overlap inside a
  worker; scale by queues, not by processes);
- ``task_acks_late`` + ``task_reject_on_worker_lost``: a worker that dies mid-task
  leaves its message on the broker for the next worker (the tasks are idempotent, and
  the task lease in MongoDB stops two runs of one (task, site) from overlapping);
- the hard time limit from ``daemon.task_time_limit``, a soft one a little earlier;
- results in the application database (collection ``celery_taskmeta``, extended with
  the task name, args, worker and queue, expiring after ``daemon.result_expires``);
- ``amqp://`` or ``amqps://`` with ``broker_use_ssl``; a broker that is down is retried
  forever with back-off, one log line per attempt;
- explicit routing (``route_task``): ``cheeto.slurm_sync`` goes to ``slurm.<site>``,
  picked from its site argument, so even a bare ``slurm_sync.delay("farm")`` reaches
  the site's head node; every other cheeto task goes to ``cheeto`` (the hub).
"""

from __future__ import annotations

import ssl
from typing import Any

from celery import Celery

from ..config import BrokerSSLConfig, Config, MongoConfig
from .config import BY_CELERY_NAME, HUB_QUEUE, TASKMETA_COLLECTION, daemon_config, site_queue

GROUPMETA_COLLECTION = "celery_groupmeta"

_CERT_REQS = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL,
              "required": ssl.CERT_REQUIRED}


def soft_time_limit(hard: int) -> int:
    """A little before the hard limit: 10% of it, at most 5 minutes, at least 1 second."""
    return hard - min(300, max(1, hard // 10))


def result_backend(mongo: MongoConfig) -> tuple[str, dict[str, Any]]:
    """(``result_backend`` URL, ``mongodb_backend_settings``) for the application database.

    The embedded store is reached at its socket (or host and port). A real MongoDB keeps
    its whole URI (replica set, hosts, options) and gets the same credentials and TLS
    settings as the store's own client (``store.credential_options``).
    """
    options: dict[str, Any] = {
        # a worker storing a result waits out an election (store.server_selection_seconds)
        "serverSelectionTimeoutMS": int(max(mongo.election_wait_seconds,
                                            mongo.timeout_seconds) * 1000),
        "connectTimeoutMS": int(mongo.timeout_seconds * 1000),
    }
    settings_extra: dict[str, Any] = {}
    if mongo.is_embedded:
        from ..embedded import EmbeddedServer

        server = EmbeddedServer(mongo.embedded)
        # Celery rebuilds host:port pairs from the URL, which a socket path does not
        # survive; ``mongo_host`` hands pymongo the URI itself. The TCP credential goes
        # in the options, never the URL.
        url = server.uri
        settings_extra["mongo_host"] = server.uri
        options.update(server.client_options())
    else:
        from ..store import credential_options

        assert mongo.uri is not None
        url = mongo.uri
        options.update(credential_options(mongo))
    settings = {"database": mongo.database, "taskmeta_collection": TASKMETA_COLLECTION,
                "groupmeta_collection": GROUPMETA_COLLECTION, "options": options,
                **settings_extra}
    return url, settings


def broker_ssl(config: BrokerSSLConfig | None) -> dict[str, Any] | None:
    """``broker_use_ssl`` for py-amqp (None when not configured)."""
    if config is None:
        return None
    options: dict[str, Any] = {"cert_reqs": _CERT_REQS[config.cert_reqs]}
    if config.ca_file:
        options["ca_certs"] = str(config.ca_file)
    if config.cert_file:
        options["certfile"] = str(config.cert_file)
    if config.key_file:
        options["keyfile"] = str(config.key_file)
    return options


def route_task(name: str, args: Any, kwargs: Any, options: Any, task: Any = None,
               **_: Any) -> dict[str, str] | None:
    """Celery router: the site argument picks ``slurm.<site>`` for the site-bound tasks;
    every other cheeto task runs on the hub; anything else keeps Celery's default."""
    spec = BY_CELERY_NAME.get(name)
    if spec is None:
        return None
    if not spec.on_site_queue:
        return {"queue": HUB_QUEUE}
    site = args[0] if args else (kwargs or {}).get("site")
    if not isinstance(site, str) or not site:
        raise ValueError(f"{name} needs its site as the first argument (it picks the queue)")
    return {"queue": site_queue(site)}


def celery_settings(config: Config) -> dict[str, Any]:
    """Every Celery setting the config decides (plain data, easy to test)."""
    daemon = daemon_config(config)
    backend_url, backend_settings = result_backend(config.mongo)
    settings: dict[str, Any] = {
        "broker_url": daemon.broker_url,
        "broker_connection_retry_on_startup": True,
        "broker_connection_retry": True,
        "broker_connection_max_retries": None,  # forever, with kombu's 2 s .. 30 s back-off
        "broker_connection_timeout": 10,
        "broker_transport_options": dict(daemon.broker_transport_options),
        "result_backend": backend_url,
        "mongodb_backend_settings": backend_settings,
        "result_extended": True,
        "result_expires": daemon.result_expires,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "timezone": daemon.timezone,
        "enable_utc": True,
        "task_default_queue": HUB_QUEUE,
        "task_routes": (route_task,),
        "task_create_missing_queues": True,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_acks_on_failure_or_timeout": True,
        "task_time_limit": daemon.task_time_limit,
        "task_soft_time_limit": soft_time_limit(daemon.task_time_limit),
        "worker_concurrency": 1,
        "worker_prefetch_multiplier": 1,
        "worker_hijack_root_logger": False,
        "worker_redirect_stdouts": False,
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        "worker_send_task_events": True,  # Flower sees task states
        "task_send_sent_event": True,
        "beat_schedule_filename": str(daemon.beat_schedule_filename),
        "beat_scheduler": "cheeto_like.daemon.beat:CheetoScheduler",
    }
    ssl_options = broker_ssl(daemon.broker_use_ssl)
    if ssl_options is not None:
        settings["broker_use_ssl"] = ssl_options
    return settings


def bare_app(config: Config, **overrides: Any) -> Celery:
    """An app with every setting and no task registered: enough to send by name and
    wait for a result (``make_app`` adds the tasks)."""
    app = Celery("cheeto", set_as_current=False)
    app.conf.update(celery_settings(config))
    app.conf.update(overrides)
    app.cheeto_config = config  # type: ignore[attr-defined]  # the task bodies read it
    return app

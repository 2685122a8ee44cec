"""The ``daemon`` section: Celery's broker, the sites it serves and its task blocks."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from . import paths
from .base import Block, UserPath
from .tasks import DaemonTasks


class BrokerSSLConfig(Block):
    """TLS to the broker (``amqps://``): the CA to verify it, and an optional client cert."""

    ca_file: UserPath | None = None  # CA bundle (PEM) to verify the broker's certificate
    cert_file: UserPath | None = None  # client certificate (PEM) shown to the broker
    key_file: UserPath | None = None  # private key (PEM) of cert_file
    # whether the broker's certificate must verify: none, optional or required
    cert_reqs: Literal["none", "optional", "required"] = "required"


class DaemonConfig(Block):
    """Celery: the broker, the sites, the task blocks (``cheeto daemon …``).

    Results go to the ``celery_taskmeta`` collection of the ``mongo`` database and expire
    after ``result_expires`` seconds. ``task_time_limit`` is the hard limit of one run
    (a soft limit fires a little earlier).
    """

    # Celery broker URL (amqp://user:password@host:port/vhost, or amqps://)
    broker_url: str = "amqp://guest:guest@127.0.0.1:5672//"
    broker_use_ssl: BrokerSSLConfig | None = None  # TLS settings for an amqps:// broker_url
    # extra Celery broker_transport_options, passed as given
    broker_transport_options: dict[str, Any] = Field(default_factory=dict)
    # sites the per-site tasks run for, unless a task block's sites says otherwise
    sites: list[str] = Field(default_factory=list)
    # user History and sync runs name as the daemon's author
    author: str = Field(default="cheeto-daemon", min_length=1)
    timezone: str = "America/Los_Angeles"  # IANA time zone of crontab schedules (Celery's timezone)
    # default $STATE_DIRECTORY/celerybeat-schedule under systemd or in the container
    beat_schedule_filename: UserPath = Field(default_factory=paths.default_beat_schedule)
    task_time_limit: int = Field(default=3600, ge=10)  # hard time limit of one task run, in seconds
    # beat: the lease ``beat:<beat_schedule_name>`` one beat holds while a standby waits
    # (a dead active beat is replaced within about this many seconds); beats sharing a
    # store and a name share one schedule and its state (collection ``beat_state``)
    beat_schedule_name: str = Field(default="default", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    # seconds the active beat's lease lasts; a standby takes over after it
    beat_lease_seconds: int = Field(default=30, ge=3, le=600)
    # the broker's consumer_timeout (ms) as set in rabbitmq.conf, for a worker that cannot
    # read it (rabbitmqctl unreachable from the worker's host); a value read wins
    broker_consumer_timeout_ms: int | None = Field(default=None, ge=0)
    # rabbitmqctl the worker asks for the broker's consumer_timeout at start
    rabbitmqctl: str = "rabbitmqctl"
    result_expires: int = Field(default=86400, gt=0)  # seconds task results stay in celery_taskmeta
    # Flower's basic auth, user:password[,user:password]; $FLOWER_BASIC_AUTH wins
    flower_basic_auth: SecretStr | None = None
    # one block per scheduled task; an absent block disables its task
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

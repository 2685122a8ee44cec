"""``cheeto_queue_messages{queue}``: the messages waiting in the hub queue and in every
configured site's ``slurm.<site>`` queue, asked of the broker when Prometheus scrapes.

Why a passive ``queue.declare``: it is AMQP's own answer to "how many ready messages",
needs no management plugin, no HTTP port and no extra credentials (the daemon's broker
URL and TLS settings, through the Celery app's connection), and never creates a queue
(a queue nobody declared yet, because its worker never started, answers 404: 0
messages, which is what is waiting there).

Why it never raises: a broker that is down must not turn the whole scrape of beat into
an error. It yields no sample then (the series goes absent, which an alert can name),
and each scrape waits at most ``timeout`` seconds for the connection. Registered for
the beat role (``install``): one process of the stack asks, not every worker.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 2.0
NOT_FOUND = 404


def queues_of(config: Any) -> list[str]:
    """The hub queue, then ``slurm.<site>`` for every site a site-queue task runs at
    (``daemon.sites`` and any task block's own ``sites``), without repeats."""
    from ..daemon.config import (
        HUB_QUEUE,
        TASKS,
        TaskDisabled,
        daemon_config,
        site_queue,
        task_block,
    )

    sites = list(daemon_config(config).sites)
    for spec in TASKS.values():
        if not spec.on_site_queue:
            continue
        try:
            block = task_block(config, spec)
        except TaskDisabled:
            continue
        sites.extend(getattr(block, "sites", None) or ())
    return [HUB_QUEUE, *dict.fromkeys(site_queue(site) for site in sites)]


class QueueDepth:
    """A collector: one passive declare per queue on one short-lived connection.

    ``connect``: a function returning a kombu ``Connection`` (the Celery app's
    ``connection_for_read``, which carries the broker URL, TLS and transport options)."""

    def __init__(self, connect: Any, queues: Iterable[str], *,
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        self.connect = connect
        self.queues = list(queues)
        self.timeout = timeout

    def depths(self) -> dict[str, int] | None:
        """Messages ready per queue; None when the broker cannot be reached."""
        from amqp.exceptions import NotFound

        try:
            conn = self.connect()
        except Exception as exc:
            log.warning("queue depth: no broker connection: %s", exc)
            return None
        try:
            conn.ensure_connection(max_retries=0, timeout=self.timeout)  # no retry
            found: dict[str, int] = {}
            channel = conn.channel()
            for queue in self.queues:
                try:
                    _, messages, _ = channel.queue_declare(queue=queue, passive=True)
                    found[queue] = int(messages)
                except NotFound:  # nobody declared it: nothing waits there
                    found[queue] = 0
                    channel = conn.channel()  # the broker closed the channel with its 404
            return found
        except Exception as exc:  # down, refused, timed out: no sample, never an error
            log.warning("queue depth: the broker did not answer: %s", exc)
            return None
        finally:
            try:
                conn.release()
            except Exception:  # a connection that never opened
                log.debug("queue depth: closing the connection failed", exc_info=True)

    def collect(self) -> Iterator[Any]:
        found = self.depths()
        if found is None:
            return
        from .families import collected

        yield collected("cheeto_queue_messages",
                        [({"queue": queue}, n) for queue, n in found.items()])


def for_app(app: Any, config: Any, *, timeout: float = DEFAULT_TIMEOUT) -> QueueDepth:
    """The collector for a Celery app built from ``config`` (``daemon.app.make_app``)."""

    def connect() -> Any:
        conn = app.connection_for_read()
        conn.connect_timeout = timeout
        return conn

    return QueueDepth(connect, queues_of(config), timeout=timeout)


def install(app: Any, config: Any) -> None:
    """Expose the queue depths on beat's metrics port."""
    from . import add_collector

    add_collector("beat", for_app(app, config))

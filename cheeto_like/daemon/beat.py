"""Beat with a standby, and the schedule's state in the store (issue 25).

Two ``cheeto daemon beat`` processes may run on one store (two hosts, or a restart that
overlaps the old process): exactly one sends.

- **Leadership** is the lease ``beat:<daemon.beat_schedule_name>`` (``sync.lease``: an
  insert decides the race, a heartbeat renews it every third of
  ``daemon.beat_lease_seconds``). A beat that cannot take it stands by and tries again
  every ``poll`` seconds; when the active beat dies its lease expires and the standby
  takes over. A beat stops sending as soon as its last renewal is older than two thirds
  of the TTL (a store it cannot reach, a lease taken over), before the lease could have
  expired, and before every send it reads the lease back: it must still name this beat.
  The local pidfile stays as the guard against two beats on one host.
- **The schedule's state** is in the store, not in beat's local shelve file: collection
  ``beat_state``, one document per entry (``_id`` ``<schedule>:<entry>``) holding the
  store-clock time the entry was last *sent*. Every tick the active beat reads it and
  judges each entry with Celery's own ``schedule.is_due(last sent)``, evaluated on the
  store's clock (``hello``'s ``localTime``). So a beat taking over neither re-sends what
  the previous one sent nor skips what it did not; and a send that fails (the broker is
  down) records nothing, so the entry stays due and is sent **once** when the broker is
  back, however many of its slots passed meanwhile (a one-minute entry down for ten
  minutes is sent once, not ten times; the weekly audit is not skipped).
  Celery's stock scheduler advances an entry before sending (``reserve``), which is how
  a tick during a broker outage was lost.
- The record is written after the send: a beat that dies between the two makes its
  successor send that entry again (at most once more); the tasks are idempotent and the
  task lease turns an overlapping copy into a skip. The opposite order would lose runs.

Entries new to the store start from the local shelve's last run (an upgrade neither
re-sends nor skips) or now, never later than the store's clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from celery.beat import PersistentScheduler

from ..config import Config

log = logging.getLogger("cheeto_like.daemon")

STATE_COLLECTION = "beat_state"
LEASE_TARGET = "beat"
RETRY_FIRST_S = 2.0  # a failed send is retried after this, doubling up to RETRY_MAX_S
RETRY_MAX_S = 30.0


def _ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


class StoreClock:
    """The store's clock as Celery's ``nowfun`` (picklable: beat's shelve pickles the
    schedules): this host's time plus the offset last measured against the store."""

    offset_s: float = 0.0  # process-wide: one beat per process

    def __init__(self, tz: tzinfo) -> None:
        self.tz = tz

    def __call__(self) -> datetime:
        return datetime.now(UTC).astimezone(self.tz) + timedelta(
            seconds=StoreClock.offset_s)


class Leadership:
    """Holds, or waits for, the beat lease in a thread with its own event loop (beat's
    loop is synchronous and sleeps between ticks; the lease's heartbeat must not)."""

    def __init__(self, config: Config, schedule: str, ttl: timedelta) -> None:
        self.config = config
        self.schedule = schedule
        self.ttl = ttl
        self.poll_s = max(1.0, ttl.total_seconds() / 6)
        self.key = f"{LEASE_TARGET}:{schedule}"
        self.holder: str | None = None
        self._active = threading.Event()
        self._stop = threading.Event()
        self._renewed_at = 0.0  # monotonic time of the last renewal seen
        self._thread = threading.Thread(target=self._run, name=f"lease {self.key}",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Release the lease (a standby takes over at once, not after the TTL)."""
        self._stop.set()
        self._thread.join(timeout)

    def sending(self) -> bool:
        """This beat holds the lease and renewed it recently enough to send."""
        fresh = time.monotonic() - self._renewed_at < self.ttl.total_seconds() * 2 / 3
        return self._active.is_set() and fresh

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _pause(self, seconds: float) -> None:
        # the stop flag is a threading.Event (set from beat's thread): poll it
        await asyncio.to_thread(self._stop.wait, seconds)

    async def _main(self) -> None:
        from pymongo.errors import PyMongoError

        from ..errors import Busy, CheetoError
        from ..store import Store, connect
        from ..sync.lease import lease

        store: Store | None = None
        standing_by: str | None = None
        try:
            while not self._stop.is_set():
                try:
                    if store is None:
                        store = await connect(self.config.mongo, autostart=False,
                                              long_running=True)
                    async with lease(store, LEASE_TARGET, self.schedule, ttl=self.ttl) as held:
                        self.holder, standing_by = held.holder, None
                        self._renewed_at, renewals = time.monotonic(), held.renewals
                        self._active.set()
                        log.info("beat: this beat sends the schedule %r (lease %s, %s)",
                                 self.schedule, self.key, held.holder)
                        # gone(): taken over, or too near its expiry by the store's clock
                        while held.gone() is None and not self._stop.is_set():
                            if held.renewals != renewals:
                                self._renewed_at, renewals = time.monotonic(), held.renewals
                            await asyncio.sleep(0.1)
                        self._active.clear()
                        if held.gone() is not None:
                            log.error("beat: %s; standing by", held.lost)
                except Busy as exc:
                    if standing_by is None:  # once per spell as the standby
                        standing_by = exc.message
                        log.info("beat: standing by: the schedule %r is sent by another beat "
                                 "(%s); polling every %gs", self.schedule, exc.message,
                                 self.poll_s)
                    await self._pause(self.poll_s)
                except (CheetoError, PyMongoError, OSError) as exc:
                    self._active.clear()
                    log.warning("beat: cannot hold the lease %s: %s: %s; retrying in %gs",
                                self.key, type(exc).__name__, exc, self.poll_s)
                    await self._pause(self.poll_s)
        finally:
            self._active.clear()
            if store is not None:
                with contextlib.suppress(Exception):
                    await store.close()


class ScheduleState:
    """The ``beat_state`` documents and the store's clock, through a synchronous client
    (beat's loop is synchronous; the same client settings as the result backend)."""

    def __init__(self, config: Config, schedule: str) -> None:
        from pymongo import MongoClient, WriteConcern

        from .settings import result_backend

        url, settings = result_backend(config.mongo)
        self.client: MongoClient[dict[str, Any]] = MongoClient(
            settings.get("mongo_host", url), **settings["options"])
        database = self.client[config.mongo.database]
        self.database = database
        majority = WriteConcern("majority")
        self.states = database.get_collection(STATE_COLLECTION, write_concern=majority)
        self.leases = database.get_collection("sync_leases")
        self.schedule = schedule
        self._clock_warned = False

    def _id(self, entry: str) -> str:
        return f"{self.schedule}:{entry}"

    def measure_clock(self) -> None:
        """Set ``StoreClock.offset_s`` from the store's ``localTime`` (this host's clock,
        with one warning, when the store does not say)."""
        before = time.time()
        hello = self.database.command("hello")
        after = time.time()
        when = hello.get("localTime")
        if not isinstance(when, datetime):
            if not self._clock_warned:
                self._clock_warned = True
                log.warning("beat: the store does not report its clock (hello.localTime); "
                            "judging the schedule by this host's clock")
            StoreClock.offset_s = 0.0
            return
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        StoreClock.offset_s = when.timestamp() - (before + after) / 2

    def read(self) -> dict[str, int]:
        """Entry name -> last sent (epoch ms), for this schedule."""
        prefix = f"{self.schedule}:"
        found = {}
        for doc in self.states.find({"schedule": self.schedule}):
            if str(doc["_id"]).startswith(prefix):
                found[str(doc["_id"])[len(prefix):]] = int(doc["last_sent_ms"])
        return found

    def record(self, entry: str, sent_ms: int, *, holder: str | None,
               task_id: str | None) -> None:
        self.states.replace_one({"_id": self._id(entry)},
                                {"_id": self._id(entry), "schedule": self.schedule,
                                 "entry": entry, "last_sent_ms": sent_ms, "by": holder,
                                 "task_id": task_id}, upsert=True)

    def still_ours(self, key: str, holder: str | None) -> bool:
        """The lease, read back just before a send, still names this beat."""
        return holder is not None and self.leases.find_one(
            {"_id": key, "holder": holder}, {"_id": 1}) is not None

    def close(self) -> None:
        self.client.close()


class CheetoScheduler(PersistentScheduler):
    """Beat's scheduler: sends only while it holds the beat lease, and judges every entry
    from the store's record of its last send (see the module docstring)."""

    leadership: Leadership | None = None
    state: ScheduleState | None = None

    def _ensure_connected(self) -> Any:
        """Fail fast instead of blocking in a reconnect loop (Celery retries forever by
        default): the tick records nothing and retries the send itself."""
        def _error(exc: Exception, interval: float) -> None:
            log.debug("beat: broker connection error: %s", exc)

        return self.connection.ensure_connection(_error, 1)

    def _start(self) -> tuple[Leadership, ScheduleState]:
        if self.leadership is None or self.state is None:
            config: Config = self.app.cheeto_config  # type: ignore[attr-defined]
            from .config import daemon_config

            daemon = daemon_config(config)
            self.state = ScheduleState(config, daemon.beat_schedule_name)
            self.leadership = Leadership(config, daemon.beat_schedule_name,
                                         timedelta(seconds=daemon.beat_lease_seconds))
            self._clock = StoreClock(self.app.timezone)
            self._retry: dict[str, tuple[float, float]] = {}  # name -> (at, backoff)
            self._failing: set[str] = set()
            self.leadership.start()
        return self.leadership, self.state

    def tick(self, *args: Any, **kwargs: Any) -> float:
        leader, state = self._start()
        poll = leader.poll_s
        if not leader.sending():
            return poll
        from pymongo.errors import PyMongoError

        try:
            state.measure_clock()
            sent = state.read()
            return min(poll, self._send_due(leader, state, sent))
        except PyMongoError as exc:
            log.warning("beat: cannot read the schedule's state from the store: %s: %s; "
                        "retrying in %gs", type(exc).__name__, exc, poll)
            return poll

    def _send_due(self, leader: Leadership, state: ScheduleState, sent: dict[str, int]) -> float:
        wait = float(self.max_interval)
        now = self._clock()
        for name, entry in list(self.schedule.items()):
            entry.schedule.nowfun = self._clock
            last_ms = sent.get(name)
            if last_ms is None:
                seed = min(entry.last_run_at.astimezone(UTC)
                           if entry.last_run_at.tzinfo else now, now)
                last_ms = _ms(seed)
                state.record(name, last_ms, holder=leader.holder, task_id=None)
            entry.last_run_at = datetime.fromtimestamp(last_ms / 1000, tz=UTC) \
                .astimezone(self.app.timezone)
            due, next_s = entry.is_due()
            if not due:
                wait = min(wait, next_s)
                continue
            retry = self._retry.get(name)
            if retry is not None and time.monotonic() < retry[0]:
                wait = min(wait, retry[0] - time.monotonic())
                continue
            if not leader.sending() or not state.still_ours(leader.key, leader.holder):
                log.warning("beat: no longer holds the lease %s; not sending %s", leader.key,
                            name)
                return leader.poll_s
            task_id = self._send(name, entry)
            if task_id is None:
                backoff = min(RETRY_MAX_S, (retry[1] * 2) if retry else RETRY_FIRST_S)
                self._retry[name] = (time.monotonic() + backoff, backoff)
                wait = min(wait, backoff)
                continue
            self._retry.pop(name, None)
            sent_at = self._clock()
            state.record(name, _ms(sent_at), holder=leader.holder, task_id=task_id)
            entry.last_run_at = sent_at
            entry.total_run_count += 1
            wait = min(wait, entry.is_due()[1])
        return max(wait, 0.0)

    def _send(self, name: str, entry: Any) -> str | None:
        """Publish one run: its task id, or None (logged; the entry stays due)."""
        try:
            result = self.apply_async(entry, producer=self.producer, advance=False)
        except Exception as exc:  # the broker, mostly: say it once per outage
            if name not in self._failing:
                self._failing.add(name)
                log.error("beat: could not send %s (%s): %s; it stays due and is sent once "
                          "the broker answers", name, entry.task, exc)
            log.debug("beat send failure", exc_info=True)
            with contextlib.suppress(Exception):
                self.__dict__.pop("producer", None)  # a fresh connection next time
            return None
        if name in self._failing:
            self._failing.discard(name)
            log.warning("beat: sent %s (%s) after the broker came back (once, for every "
                        "slot missed)", name, entry.task)
        else:
            log.info("beat: sent %s (%s)", name, entry.task)
        return str(getattr(result, "id", "") or "")

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.leadership is not None:
                self.leadership.stop()
            if self.state is not None:
                self.state.close()

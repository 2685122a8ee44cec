"""pytest fixtures for the real services: each starts once per session, each module
starts from a clean state.

This module is a plugin, registered once by `pytest_plugins` in tests/conftest.py; test
modules use the fixtures by name and never import them. pytest makes a fixture
definition of its own for every module that imports a fixture function and caches a
session fixture's value per definition, so importing them made slapd, slurmdbd and the
live cluster start once per importing module (and all of them live until the session
ends). `_serve` fails a second start of a service in one session, which is what such an
import would cause again.

Each service starts on first request (a session that never asks for one never pays for
it), lives for the whole session under the session's tmp dir, and is killed at the end.
A service that cannot start raises ServiceError, which pytest reports as an error in
every test that needs it: integration tests must never silently skip.

Isolation between modules, where a module used to get a service of its own:
- `slapd` (module scope) empties the data tree below the suffix, back to the initial OUs;
- `slurm_accounting` (module scope) restarts slurmdbd on an empty database;
- `slurm_cluster` (module scope) resets the live cluster (jobs, users, accounts, QOS, the
  node) when the module starts and cancels the module's jobs when it ends;
- `rabbitmq` (session scope): modules take their own vhost, `.vhost_url(module_database(
  request))`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Protocol

import pytest

from ._proc import ServiceError
from .ldap import Slapd
from .rabbitmq import RabbitMQ
from .slurm import SlurmAccounting
from .slurm_cluster import SlurmCluster

__all__ = ["BRING_UP_TIMES", "RESET_SECONDS", "STARTS", "rabbitmq", "slapd", "slurm_accounting",
           "slurm_cluster"]

# service name -> (seconds to ready, per-step timings); shown in the terminal summary
BRING_UP_TIMES: dict[str, tuple[float, dict[str, float]]] = {}
# service name -> times started (1 at most: `_claim`); seconds spent in per-module resets
STARTS: Counter[str] = Counter()
RESET_SECONDS: dict[str, float] = {}
_UNUSED: set[str] = set()  # started, and no module has had it yet: nothing to reset


class _Service(Protocol):
    startup_seconds: float
    timings: dict[str, float]

    def stop(self) -> None: ...


def _claim(name: str) -> None:
    """Refuse a second start of `name`: it means a second fixture definition (a module
    that imports a fixture from here instead of using the plugin's)."""
    if STARTS[name]:
        raise ServiceError(f"{name} was already started in this session: a module imports "
                           "a fixture from tests.services.fixtures (it is a plugin "
                           "registered in tests/conftest.py; use the fixture by name)")
    STARTS[name] += 1
    _UNUSED.add(name)


def _reset(name: str, reset: Callable[[], object]) -> None:
    """Run a service's per-module reset (not for the first module: it is fresh) and add
    its seconds to the summary."""
    if name in _UNUSED:
        _UNUSED.discard(name)
        return
    started = time.monotonic()
    reset()
    RESET_SECONDS[name] = RESET_SECONDS.get(name, 0.0) + time.monotonic() - started


def _serve[S: _Service](name: str, service: S) -> Iterator[S]:
    """Yield an already started service, record its bring-up time, always stop it."""
    BRING_UP_TIMES[name] = (service.startup_seconds, dict(service.timings))
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture(scope="session")
def slurm_accounting_service(tmp_path_factory: pytest.TempPathFactory,
                             ) -> Iterator[SlurmAccounting]:
    """The session's one munged + MariaDB + slurmdbd; tests take `slurm_accounting`."""
    _claim("slurm accounting")
    service = SlurmAccounting(tmp_path_factory.mktemp("slurm")).start()
    yield from _serve("slurm accounting", service)


@pytest.fixture(scope="module")
def slurm_accounting(slurm_accounting_service: SlurmAccounting) -> SlurmAccounting:
    """slurmdbd as just started, for this module (no clusters until `.add_cluster()`);
    use `.sacctmgr()`, `.env`, `.sql()`. The module's tests share it."""
    _reset("slurm accounting", slurm_accounting_service.reset)
    return slurm_accounting_service


@pytest.fixture(scope="session")
def slurm_cluster_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """The session's one live cluster (its own munged + MariaDB + slurmdbd, independent
    of `slurm_accounting`'s, + slurmctld + slurmd); tests take `slurm_cluster`."""
    _claim("slurm cluster")
    service = SlurmCluster(tmp_path_factory.mktemp("slurmc")).start()
    yield from _serve("slurm cluster", service)


@pytest.fixture(scope="module")
def slurm_cluster(slurm_cluster_service: SlurmCluster) -> Iterator[SlurmCluster]:
    """A live one-node cluster `farm` (slurmctld + slurmd, typed fake GPUs): submit real
    jobs with `.submit(user, …)`/`.srun(…)`, watch them with `.job()`/`.wait_*()`.

    Shared by every live module of the session: reset when this module starts (no jobs,
    users, accounts or QOS but the defaults, the node up), its jobs cancelled when it
    ends. Tests that need a clean cluster call `.reset()` first (see slurm_cluster.py)."""
    cluster = slurm_cluster_service
    _reset("slurm cluster", cluster.reset)
    yield cluster
    cluster.cancel_all()  # free the node now; the next module's reset() does the rest


@pytest.fixture(scope="session")
def slapd_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slapd]:
    """The session's one OpenLDAP; tests take `slapd`."""
    _claim("slapd")
    service = Slapd(tmp_path_factory.mktemp("ldap")).start()
    yield from _serve("slapd", service)


@pytest.fixture(scope="module")
def slapd(slapd_service: Slapd) -> Slapd:
    """OpenLDAP with rfc2307bis + openssh-lpk, its tree empty for this module (the suffix
    and ou=people/groups/automount); use `.uri`, `.root_dn`, `.ca_file`."""
    _reset("slapd", slapd_service.reset)
    return slapd_service


@pytest.fixture(scope="session")
def rabbitmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitMQ]:
    """The session's one isolated RabbitMQ node (~5 s boot). Celery tests use
    `.vhost_url(module_database(request))` as their broker, so the modules' workers never
    see each other's queues; `.url` is the default vhost."""
    _claim("rabbitmq")
    service = RabbitMQ(tmp_path_factory.mktemp("rabbitmq")).start()
    yield from _serve("rabbitmq", service)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line per service started in this session: starts, total and per-step seconds,
    and the time the per-module resets took, so slow start-ups show up in CI logs."""
    if not BRING_UP_TIMES:
        return
    terminalreporter.section("service bring-up times")
    for name, (total, steps) in BRING_UP_TIMES.items():
        detail = ", ".join(f"{step} @{at:.2f}s" for step, at in steps.items())
        resets = f"; resets {RESET_SECONDS[name]:.2f}s" if name in RESET_SECONDS else ""
        terminalreporter.write_line(
            f"{name}: started {STARTS[name]}x, {total:.2f}s ({detail}){resets}")

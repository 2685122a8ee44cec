"""Session-scoped pytest fixtures for the real services.

Each service starts on first request (a session that never asks for one never pays for
it), lives for the whole session under the session's tmp dir, and is killed at the end.
A service that cannot start raises ServiceError, which pytest reports as an error in
every test that needs it: integration tests must never silently skip.

tests/services/conftest.py re-exports these for tests in this directory; elsewhere use
`from tests.services.fixtures import slapd  # noqa: F401` (or list the module in a
conftest's `pytest_plugins`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import pytest

from .ldap import Slapd
from .rabbitmq import RabbitMQ
from .slurm import SlurmAccounting
from .slurm_cluster import SlurmCluster

__all__ = ["BRING_UP_TIMES", "rabbitmq", "slapd", "slurm_accounting", "slurm_cluster"]

# service name -> (seconds to ready, per-step timings); shown in the terminal summary
BRING_UP_TIMES: dict[str, tuple[float, dict[str, float]]] = {}


class _Service(Protocol):
    startup_seconds: float
    timings: dict[str, float]

    def stop(self) -> None: ...


def _serve[S: _Service](name: str, service: S) -> Iterator[S]:
    """Yield an already started service, record its bring-up time, always stop it."""
    BRING_UP_TIMES[name] = (service.startup_seconds, dict(service.timings))
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture(scope="session")
def slurm_accounting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmAccounting]:
    """munged + MariaDB + slurmdbd; use `.sacctmgr()`, `.env`, `.add_cluster()`, `.sql()`."""
    service = SlurmAccounting(tmp_path_factory.mktemp("slurm")).start()
    yield from _serve("slurm accounting", service)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A live one-node cluster `farm` (its own slurmdbd + slurmctld + slurmd, ~1 s): submit
    real jobs with `.submit(user, …)`/`.srun(…)`, watch them with `.job()`/`.wait_*()`.
    Shared by the whole session: tests call `.reset()` first (see slurm_cluster.py)."""
    service = SlurmCluster(tmp_path_factory.mktemp("slurmc")).start()
    yield from _serve("slurm cluster", service)


@pytest.fixture(scope="session")
def slapd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slapd]:
    """OpenLDAP with rfc2307bis + openssh-lpk; use `.uri`, `.root_dn`, `.ca_file`."""
    service = Slapd(tmp_path_factory.mktemp("ldap")).start()
    yield from _serve("slapd", service)


# pytest makes a fixture definition of its own for every module that imports a fixture
# function, and caches a session fixture's value per definition: N test modules importing
# `rabbitmq` would each boot (and keep until the session ends) a node of their own. The
# broker is therefore started once, shared by every definition, and stopped when the last
# of them is torn down (all at the end of the session). Modules take their own vhost.
_SHARED_BROKER: list[RabbitMQ] = []
_BROKER_USERS = [0]


@pytest.fixture(scope="session")
def rabbitmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitMQ]:
    """The session's one isolated RabbitMQ node (~5 s boot). Celery tests use
    `.vhost_url(module_database(request))` as their broker, so the modules' workers never
    see each other's queues; `.url` is the default vhost."""
    if not _SHARED_BROKER:
        _SHARED_BROKER.append(RabbitMQ(tmp_path_factory.mktemp("rabbitmq")).start())
        BRING_UP_TIMES["rabbitmq"] = (_SHARED_BROKER[0].startup_seconds,
                                      dict(_SHARED_BROKER[0].timings))
    service = _SHARED_BROKER[0]
    _BROKER_USERS[0] += 1
    try:
        yield service
    finally:
        _BROKER_USERS[0] -= 1
        if _BROKER_USERS[0] == 0:
            _SHARED_BROKER.clear()
            service.stop()

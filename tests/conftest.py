"""Session-wide fixtures: one store server per session, one database per test module.

By default the store is the embedded nx-27017 server, started once per session on its
default transport (a Unix socket in its data directory). Set ``CHEETO_TEST_MONGO_URI``
(a replica set URI) to run the same suite on a real MongoDB instead.

The session never sees the user's own config or data: ``XDG_CONFIG_HOME``,
``XDG_DATA_HOME``, ``XDG_STATE_HOME`` and ``XDG_CACHE_HOME`` point into a throwaway
directory and ``CHEETO_CONFIG``/``CHEETO_PROFILE`` are unset, so a test that forgets
``--config`` cannot read a real config or start (and leave running) the default
embedded store in the user's home. A test that does start it fails the session.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pymongo import DeleteMany
from ruamel.yaml import YAML

from cheeto_like.config import EmbeddedStoreConfig, MongoConfig
from cheeto_like.constants import ACCESS_GROUP_NAMES, SPECIAL_GID_START, STATUS_GROUP_NAMES
from cheeto_like.embedded import EmbeddedServer
from cheeto_like.models import ALL_MODELS, Group, NameClaim
from cheeto_like.models.base import insert_document
from cheeto_like.store import Store, client_bulk_write_supported, connect

# The real services' fixtures (slapd, slurm_accounting, slurm_cluster, rabbitmq), defined
# once for the whole session so each service starts once; see tests/services/fixtures.py.
pytest_plugins = ["tests.services.fixtures"]

ISOLATED_HOME = Path(tempfile.mkdtemp(prefix="cheeto-test-xdg-"))
for _var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
    os.environ[_var] = str(ISOLATED_HOME / _var.lower())
for _var in ("CHEETO_CONFIG", "CHEETO_PROFILE"):
    os.environ.pop(_var, None)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop a default embedded store some test autostarted (it would outlive the run),
    fail the session for it, and remove the throwaway XDG directories."""
    pid_file = ISOLATED_HOME / "xdg_data_home" / "cheeto" / "store" / "nx.pid"
    if pid_file.exists():
        try:
            os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
        except (ValueError, ProcessLookupError):
            pass
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print("\nerror: a test started the default embedded store (a CLI call without "
              "a config pointing at the test store); it has been stopped")
    shutil.rmtree(ISOLATED_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def mongo_config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MongoConfig]:
    """The store every test talks to: a real MongoDB via CHEETO_TEST_MONGO_URI, or a
    session-wide embedded server (a failure to start fails the run)."""
    if uri := os.environ.get("CHEETO_TEST_MONGO_URI"):
        yield MongoConfig(uri=uri)
        return
    embedded = EmbeddedStoreConfig(path=tmp_path_factory.mktemp("store"))
    # a killed run leaves none; fail points (configureFailPoint) as mongod's test setup
    server = EmbeddedServer(embedded, exit_with=os.getpid(),
                            set_parameters={"enableTestCommands": "1"})
    server.start_background()
    try:
        yield MongoConfig(embedded=embedded)
    finally:
        server.stop()


def module_database(request: pytest.FixtureRequest) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", request.module.__name__.removeprefix("tests."))
    return f"t_{name}"[:63]


@pytest.fixture(scope="module")
async def store(mongo_config: MongoConfig, request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """This module's own database, empty, with every index in place."""
    name = module_database(request)
    connected = await connect(mongo_config, database=name, autostart=False, create_indexes=False)
    await connected.drop_database()
    await connected.bind()
    try:
        yield connected
    finally:
        await connected.close()


async def seed_access_status(gid_start: int = SPECIAL_GID_START) -> None:
    """Insert the standard access and status groups directly (no History row), with
    their name-registry rows: two inserts (most tests start here)."""
    groups, claims = [], []
    gid = gid_start
    for kind, names in (("access", ACCESS_GROUP_NAMES), ("status", STATUS_GROUP_NAMES)):
        for shorthand, name in names.items():
            groups.append(insert_document(Group(name=name, gid=gid, type=kind,
                                                shorthand=shorthand)))
            claims.append(insert_document(NameClaim(name=name, kind="group")))  # as seeding
            gid += 1
    await Group.get_pymongo_collection().insert_many(groups)
    await NameClaim.get_pymongo_collection().insert_many(claims)


async def wipe() -> None:
    """Empty every collection: one client ``bulkWrite`` where the server has it (a
    round trip per collection, ~70 of them, before every test was minutes of the
    suite), else a ``delete_many`` each."""
    database = Group.get_pymongo_collection().database
    if client_bulk_write_supported(database.client):
        db = database.name
        await database.client.bulk_write(
            [DeleteMany({}, namespace=f"{db}.{model.get_collection_name()}")
             for model in ALL_MODELS], ordered=False)
        return
    for model in ALL_MODELS:
        await model.get_pymongo_collection().delete_many({})


@pytest.fixture
async def db(store: Store) -> AsyncIterator[Store]:
    """An empty database with the access/status groups seeded, for one test."""
    await wipe()
    await seed_access_status()
    yield store


@pytest.fixture
async def empty_db(store: Store) -> AsyncIterator[Store]:
    """A completely empty database (nothing seeded), for one test."""
    await wipe()
    yield store


# -- the CLI, in process -----------------------------------------------------------------


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)

    def yaml(self) -> Any:
        return YAML(typ="safe").load(self.stdout)

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


Cli = Callable[..., Awaitable[CliResult]]


@pytest.fixture(scope="module")
def cli_config(mongo_config: MongoConfig, request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A config file pointing the CLI at this module's database."""
    block: dict[str, Any] = {"database": module_database(request)}
    if mongo_config.uri:
        block["uri"] = mongo_config.uri
    else:
        block["embedded"] = {"path": str(mongo_config.embedded.path),
                             "port": mongo_config.embedded.port}
    path = tmp_path_factory.mktemp("cli") / "config.yaml"
    buffer = io.StringIO()
    YAML(typ="safe").dump({"mongo": {"default": block}}, buffer)
    path.write_text(buffer.getvalue())
    return path


@pytest.fixture
def cli(store: Store, cli_config: Path) -> Cli:
    """Run ``cheeto ARGS…`` in process against this module's database.

    The command runs in a worker thread (it owns its event loop and client); afterwards
    the document models are re-bound to the test's own store.
    """
    from cheeto_like.cli import main

    async def run(*argv: str, stdin: str = "", config: Path | None = None) -> CliResult:
        out, err = io.StringIO(), io.StringIO()
        args = [*argv, "--config", str(config or cli_config)]
        code = await asyncio.to_thread(main, args, stdout=out, stderr=err,
                                       stdin=io.StringIO(stdin))
        await store.bind(create_indexes=False)
        return CliResult(code, out.getvalue(), err.getvalue())

    return run

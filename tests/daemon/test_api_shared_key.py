"""One token key for every API process and ``cheeto token issue`` (issue 25): two real
``cheeto daemon api`` subprocesses and ``cheeto token issue`` run in another HOME share
one key, whether it is kept in the store (``api.jwt_key: store``) or is one configured
file the operator distributed; a key that is missing or cannot be made is one line at
start (exit 2), and the default under a service manager is ``$STATE_DIRECTORY/jwt.key``."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cheeto_like.auth.tokens import KEY_COLLECTION
from cheeto_like.config import MongoConfig
from cheeto_like.store import Store
from tests.conftest import module_database
from tests.daemon.test_api_live import CHEETO, write_config
from tests.services._proc import free_port, kill_procs, log_tails, spawn, wait_for
from tests.web.conftest import PASSWORDS, seed_world


@pytest.fixture(scope="module")
async def world(store: Store) -> Store:
    await seed_world(store)
    return store


def home_env(home: Path, **extra: str) -> dict[str, str]:
    """A process environment with its own HOME and XDG directories (another host's)."""
    env = {k: v for k, v in os.environ.items() if k != "STATE_DIRECTORY"}
    env.update(HOME=str(home), XDG_STATE_HOME=str(home / "state"),
               XDG_DATA_HOME=str(home / "data"), XDG_CONFIG_HOME=str(home / "config"),
               XDG_CACHE_HOME=str(home / "cache"), **extra)
    home.mkdir(parents=True, exist_ok=True)
    return env


class Api:
    """``cheeto daemon api`` in a HOME of its own."""

    def __init__(self, config: Path, home: Path, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = home.parent / f"{home.name}-api.log"
        self.proc = spawn([CHEETO, "daemon", "api", "--config", str(config), "--port",
                           str(self.port)], log=self.log, env=home_env(home, **env))

    def wait(self) -> Api:
        def up() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"api exited {self.proc.returncode}\n"
                                     f"{log_tails([self.log])}")
            try:
                return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, 60, "the API's /healthz", logs=[self.log], interval=0.1)
        return self

    def login(self, name: str) -> str:
        r = httpx.post(f"{self.url}/api/v1/login", timeout=10,
                       json={"username": name, "password": PASSWORDS[name]})
        assert r.status_code == 200, r.text
        return r.json()["access_token"]

    def me(self, token: str) -> httpx.Response:
        return httpx.get(f"{self.url}/api/v1/me", timeout=10,
                         headers={"Authorization": f"Bearer {token}"})


def issue(config: Path, home: Path, user: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CHEETO, "token", "issue", "-u", user, "--config", str(config)],
                          env=home_env(home, **env), capture_output=True, text=True,
                          timeout=120, check=False)


def start_two(config: Path, tmp: Path, **env: str) -> Iterator[tuple[Api, Api]]:
    # started together: both race to create (or read) the key
    apis = [Api(config, tmp / "host-a", **env), Api(config, tmp / "host-b", **env)]
    try:
        yield apis[0].wait(), apis[1].wait()
    finally:
        kill_procs([api.proc for api in apis])


def every_token_everywhere(config: Path, tmp: Path, a: Api, b: Api) -> None:
    tokens = [a.login("alice"), b.login("adam")]
    issued = issue(config, tmp / "host-c", "olga")
    assert issued.returncode == 0, issued.stderr
    tokens.append(issued.stdout.strip())
    for token in tokens:
        for api in (a, b):
            r = api.me(token)
            assert r.status_code == 200, (api.url, r.text)
    assert {a.me(t).json()["name"] for t in tokens} == {"alice", "adam", "olga"}


def no_key_files(tmp: Path) -> None:
    """No process made a key of its own under its HOME's state directory."""
    assert sorted(p.relative_to(tmp) for p in tmp.rglob("jwt.key")) == []


async def test_store_kept_key_is_one_for_every_process(world, mongo_config: MongoConfig,
                                                     request, tmp_path):
    await world.database[KEY_COLLECTION].drop()
    config = write_config(tmp_path / "config.yaml", mongo_config, module_database(request),
                          jwt_key="store")
    for a, b in start_two(config, tmp_path):
        every_token_everywhere(config, tmp_path, a, b)
    docs = await world.database[KEY_COLLECTION].find({}).to_list()
    assert [(d["_id"], len(d["key"])) for d in docs] == [("hs256", 64)]
    no_key_files(tmp_path)


async def test_distributed_key_file_is_one_for_every_process(world, mongo_config, request,
                                                             tmp_path):
    shared = tmp_path / "etc" / "jwt.key"  # what the operator copies to every host
    shared.parent.mkdir()
    shared.write_bytes(os.urandom(64))
    shared.chmod(0o600)
    before = shared.read_bytes()
    config = write_config(tmp_path / "config.yaml", mongo_config, module_database(request),
                          jwt_key_file=str(shared))
    for a, b in start_two(config, tmp_path):
        every_token_everywhere(config, tmp_path, a, b)
    assert shared.read_bytes() == before
    assert [p for p in tmp_path.rglob("jwt.key") if p != shared] == []


def one_error_line(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def test_a_key_file_that_cannot_be_made_is_one_line_at_start(world, mongo_config, request,
                                                               tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the key's directory should be\n")
    config = write_config(tmp_path / "config.yaml", mongo_config, module_database(request),
                          jwt_key_file=str(blocker / "jwt.key"))
    started = subprocess.run([CHEETO, "daemon", "api", "--config", str(config), "--port",
                              str(free_port())], env=home_env(tmp_path / "home"),
                             capture_output=True, text=True, timeout=120, check=False)
    one_error_line(started, "cannot create the token key", str(blocker / "jwt.key"),
                   "api.jwt_key_file", "api.jwt_key: store")


def test_token_issue_never_makes_a_key_of_its_own(world, mongo_config, request, tmp_path):
    missing = tmp_path / "keys" / "jwt.key"
    config = write_config(tmp_path / "config.yaml", mongo_config, module_database(request),
                          jwt_key_file=str(missing))
    one_error_line(issue(config, tmp_path / "home", "alice"), "no token key", str(missing))
    assert not missing.exists()
    # the default file too: nothing appears in the HOME it ran in
    config = write_config(tmp_path / "default.yaml", mongo_config, module_database(request))
    one_error_line(issue(config, tmp_path / "other", "alice"), "no token key")
    no_key_files(tmp_path)


def test_state_directory_holds_the_default_key(world, mongo_config, request, tmp_path):
    """Under systemd (``StateDirectory=``) or in the container the default key is
    ``$STATE_DIRECTORY/jwt.key``, and ``token issue`` with the same environment reaches
    it; nothing is written under the HOME."""
    state = tmp_path / "state-dir"
    state.mkdir(mode=0o700)
    config = write_config(tmp_path / "config.yaml", mongo_config, module_database(request))
    api = Api(config, tmp_path / "host-a", STATE_DIRECTORY=str(state))
    try:
        api.wait()
        assert (state / "jwt.key").stat().st_mode & 0o777 == 0o600
        issued = issue(config, tmp_path / "host-b", "alice", STATE_DIRECTORY=str(state))
        assert issued.returncode == 0, issued.stderr
        assert api.me(issued.stdout.strip()).status_code == 200
    finally:
        kill_procs([api.proc])
    assert "created a new token key" in api.log.read_text()
    assert [p for p in tmp_path.rglob("jwt.key")] == [state / "jwt.key"]


def test_init_key_makes_the_key_token_issue_then_uses(world, mongo_config, request, tmp_path):
    """``cheeto token init-key`` is the API's first start on purpose: the key appears
    where the config keeps it (0600), once; ``token issue`` then signs with it, and the
    API started later with the same key accepts the token."""
    shared = tmp_path / "etc" / "jwt.key"
    config = write_config(tmp_path / "config.yaml", mongo_config, module_database(request),
                          jwt_key_file=str(shared))
    env = home_env(tmp_path / "admin")

    def init() -> subprocess.CompletedProcess[str]:
        return subprocess.run([CHEETO, "token", "init-key", "--config", str(config)],
                              env=env, capture_output=True, text=True, timeout=120,
                              check=False)

    first = init()
    assert first.returncode == 0, first.stderr
    assert "was made (0600)" in first.stderr and shared.stat().st_mode & 0o777 == 0o600
    key = shared.read_bytes()
    again = init()
    assert again.returncode == 0 and "is already" in again.stderr
    assert shared.read_bytes() == key  # kept, never replaced
    issued = issue(config, tmp_path / "admin", "alice")
    assert issued.returncode == 0, issued.stderr
    api = Api(config, tmp_path / "host-a")
    try:
        api.wait()
        assert api.me(issued.stdout.strip()).status_code == 200
    finally:
        kill_procs([api.proc])

"""``cheeto daemon api`` as a real uvicorn subprocess: the same contract as in process
(401, 404, fqdn and alias, text vs JSON, prefix), plus what only a live server shows:
starting without the static key (nothing anonymous), ``--insecure`` opening only the
storage map, TLS from the config, and a clear one-line failure when the store is down."""

from __future__ import annotations

import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from ruamel.yaml import YAML

from cheeto_like import __version__
from cheeto_like.config import MongoConfig
from cheeto_like.operations.site import AddSiteAlias
from cheeto_like.store import Store
from tests.conftest import module_database
from tests.exports.test_golden import seed
from tests.factories import AUTHOR
from tests.services._proc import free_port, kill_procs, log_tails, spawn, wait_for

KEY = "live-api-key-9876543210-abcdefghijklmnop"
GOLDEN = Path(__file__).parent.parent / "exports" / "golden"
ROOT_TEXT = (GOLDEN / "farm.root.pub").read_text()
CHEETO = str(Path(sys.executable).parent / "cheeto")


def write_config(path: Path, mongo: MongoConfig, database: str, **api: Any) -> Path:
    block: dict[str, Any] = {"database": database}
    if mongo.uri:
        block["uri"] = mongo.uri
    else:
        block["embedded"] = {"path": str(mongo.embedded.path), "port": mongo.embedded.port}
    data: dict[str, Any] = {"mongo": {"default": block}}
    if api:
        data["api"] = {"default": api}
    with path.open("w") as out:
        YAML(typ="safe").dump(data, out)
    return path


class Server:
    """One ``cheeto daemon api`` subprocess; ``url`` once it answers /healthz."""

    def __init__(self, config: Path, log: Path, *args: str, scheme: str = "http",
                 prefix: str = "", verify: Any = True) -> None:
        self.port = free_port()
        self.log = log
        self.url = f"{scheme}://127.0.0.1:{self.port}{prefix}"
        self.proc = spawn([CHEETO, "daemon", "api", "--config", str(config),
                           "--port", str(self.port), *args], log=log)
        self.verify = verify

    def wait(self) -> Server:
        def up() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"api exited {self.proc.returncode}\n{log_tails([self.log])}")
            try:
                return httpx.get(f"{self.url}/healthz", verify=self.verify,
                                 timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, 30, "the API's /healthz", logs=[self.log], interval=0.1)
        return self

    def stop(self) -> None:
        kill_procs([self.proc])


@pytest.fixture(scope="module")
async def seeded(store: Store) -> Store:
    from tests.conftest import seed_access_status, wipe

    await wipe()
    await seed_access_status()
    await seed(store)
    await AddSiteAlias.run(store, AUTHOR, site="farm", alias="caesfarm")
    return store


@pytest.fixture(scope="module")
def database(request: pytest.FixtureRequest) -> str:
    return module_database(request)


@pytest.fixture(scope="module")
def server(seeded: Store, mongo_config: MongoConfig, database: str,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("api-live")
    config = write_config(tmp / "config.yaml", mongo_config, database, api_key=KEY,
                          prefix="/cheeto")
    srv = Server(config, tmp / "api.log", prefix="/cheeto").wait()
    try:
        yield srv
    finally:
        srv.stop()


def get(server: Server, path: str, **headers: str) -> httpx.Response:
    return httpx.get(f"{server.url}{path}", headers=headers, verify=server.verify, timeout=10)


def test_live_key_required(server):
    assert get(server, "/puppet/root-keys/farm").status_code == 401
    r = get(server, "/puppet/root-keys/farm", **{"X-API-Key": "nope"})
    assert (r.status_code, r.json()) == (401, {"detail": "invalid or missing API key"})
    assert get(server, "/puppet/storage/nowhere").status_code == 401


def test_live_json_and_text(server):
    r = get(server, "/puppet/root-keys/farm", **{"X-API-Key": KEY, "Accept": "text/plain"})
    assert (r.status_code, r.text) == (200, ROOT_TEXT)
    assert r.headers["content-type"].startswith("text/plain")
    assert "server" not in r.headers
    r = get(server, "/puppet/root-keys/farm", **{"X-API-Key": KEY})
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {"root-ssh-public-keys": [line for line in ROOT_TEXT.splitlines()
                                                 if not line.startswith("#")]}


@pytest.mark.parametrize("value", ["farm.hpc.example.org", "CAESFARM", "caesfarm"])
def test_live_fqdn_and_alias(server, value):
    r = get(server, f"/puppet/root-keys/{value}", **{"X-API-Key": KEY, "Accept": "text/plain"})
    assert (r.status_code, r.text) == (200, ROOT_TEXT)
    r = get(server, f"/puppet/storage/{value}", **{"X-API-Key": KEY})
    assert r.status_code == 200 and set(r.json()) == {"zfs", "nfs"}


def test_live_unknown_site_404(server):
    for kind in ("root-keys", "storage"):
        r = get(server, f"/puppet/{kind}/nowhere", **{"X-API-Key": KEY})
        assert (r.status_code, r.json()) == (404, {"detail": "unknown site 'nowhere'"})


def test_live_prefix_health_and_schema(server):
    assert get(server, "/healthz").json() == {"status": "ok", "version": __version__}
    assert "/cheeto/puppet/root-keys/{site}" in get(server, "/openapi.json").json()["paths"]
    unprefixed = httpx.get(f"http://127.0.0.1:{server.port}/puppet/root-keys/farm",
                           headers={"X-API-Key": KEY})
    assert unprefixed.status_code == 404


def run_cheeto(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CHEETO, *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_the_api_starts_without_a_static_key(seeded, mongo_config, database, tmp_path, host):
    """No api_key: the API starts (managed keys and tokens), and nothing is anonymous."""
    config = write_config(tmp_path / "managed.yaml", mongo_config, database)
    srv = Server(config, tmp_path / "api.log", "--host", host).wait()
    try:
        assert get(srv, "/puppet/root-keys/farm").status_code == 401
        assert get(srv, "/puppet/storage/farm").status_code == 401
    finally:
        srv.stop()
    assert "a managed key (ng apikey) or a token required" in (tmp_path / "api.log").read_text()


def test_short_api_key_is_refused(seeded, mongo_config, database, tmp_path):
    config = write_config(tmp_path / "short.yaml", mongo_config, database,
                          api_key="x" * 31)
    r = run_cheeto("daemon", "api", "--config", str(config), "--port", str(free_port()))
    assert r.returncode == 2
    assert r.stderr.splitlines() == [f"error: config {config}: api.default.api_key: api_key "
                                     "is shorter than 32 characters (try: openssl rand -hex 24)"]
    assert "x" * 31 not in r.stderr


def test_insecure_on_a_public_address_opens_only_the_storage_map(seeded, mongo_config,
                                                                 database, tmp_path):
    config = write_config(tmp_path / "open.yaml", mongo_config, database)
    srv = Server(config, tmp_path / "api.log", "--host", "0.0.0.0", "--insecure").wait()
    try:
        r = get(srv, "/puppet/storage/farm")
        assert r.status_code == 200 and set(r.json()) == {"zfs", "nfs"}
        r = get(srv, "/puppet/root-keys/farm", Accept="text/plain")
        assert r.status_code == 401  # root keys need a credential whatever the flags
    finally:
        srv.stop()
    assert "to anyone who can reach 0.0.0.0" in (tmp_path / "api.log").read_text()


def test_tls_from_config(seeded, mongo_config, database, tmp_path):
    cert, key = tmp_path / "api.crt", tmp_path / "api.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
                    "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    config = write_config(tmp_path / "tls.yaml", mongo_config, database, api_key=KEY,
                          tls_cert=str(cert), tls_key=str(key))
    srv = Server(config, tmp_path / "api.log", scheme="https",
                 verify=ssl.create_default_context(cafile=str(cert))).wait()
    try:
        r = get(srv, "/puppet/root-keys/caesfarm", **{"X-API-Key": KEY, "Accept": "text/plain"})
        assert (r.status_code, r.text) == (200, ROOT_TEXT)
        with pytest.raises(httpx.HTTPError):  # plain HTTP on the TLS port
            httpx.get(f"http://127.0.0.1:{srv.port}/healthz", timeout=5)
    finally:
        srv.stop()


def test_missing_tls_files_are_one_line(tmp_path):
    config = tmp_path / "tls.yaml"
    config.write_text(f"api:\n  default:\n    tls_cert: {tmp_path}/nope.crt\n"
                      f"    tls_key: {tmp_path}/nope.key\n    api_key: {KEY}\n")
    r = run_cheeto("daemon", "api", "--config", str(config), "--port", str(free_port()))
    assert (r.returncode, r.stderr.strip()) == (
        2, f"error: api.tls_cert {tmp_path}/nope.crt is not a readable file")


def test_store_down_is_one_line(tmp_path):
    port = free_port()
    config = tmp_path / "down.yaml"
    config.write_text(f"mongo:\n  default:\n    timeout_seconds: 0.5\n    embedded:\n"
                      f"      path: {tmp_path / 'store'}\n      port: {port}\n"
                      f"api:\n  default:\n    api_key: {KEY}\n")
    r = run_cheeto("daemon", "api", "--config", str(config), "--port", str(free_port()))
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        f"error: the embedded store is not running on unix:{tmp_path / 'store' / 'store.sock'} "
        "(start it with `cheeto db serve`)"]
    assert not (tmp_path / "store").exists()  # nothing was started behind our back


def test_bad_port_is_a_usage_error():
    r = run_cheeto("daemon", "api", "--port", "70000")
    assert r.returncode == 2 and "70000 is not a port" in r.stderr

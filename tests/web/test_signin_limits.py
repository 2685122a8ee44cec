"""Sign-in limits end to end, over real HTTP (uvicorn on loopback, configured by
``uvicorn_options``): client addresses (``X-Forwarded-For`` only from
``api.trusted_proxies``), a colleague behind a shared address, the dashboard under the
same rules, two API servers on one store adding up their counts, and the request body
cap on ``/api/v1`` (Content-Length and chunked) answered before the body is read."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from cheeto_like.store import Store, connect
from cheeto_like.web.app import create_api, uvicorn_options
from cheeto_like.web.client_address import networks, resolve
from tests.services._proc import free_port
from tests.web.conftest import PASSWORDS, api_config
from tests.web.test_api_v1 import LogText

_n = itertools.count(1)


@pytest.fixture
def api_log():  # type: ignore[no-untyped-def]
    import logging

    handler = LogText()
    ours = logging.getLogger("cheeto_like")
    level = ours.level
    ours.addHandler(handler)
    ours.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        ours.removeHandler(handler)
        ours.setLevel(level)


@asynccontextmanager
async def served(app: Any, config: Any) -> AsyncIterator[str]:
    """``app`` under uvicorn (in this event loop: the store's client lives here), with
    the options ``cheeto daemon api`` uses; yields the base URL."""
    import uvicorn

    port = free_port()
    options = uvicorn_options(config.api, "127.0.0.1", port) | {"log_level": "warning"}
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", **options))
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve())
    for _ in range(200):
        if server.started:
            break
        await asyncio.sleep(0.05)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def login(http: httpx.AsyncClient, user: str, password: str,
                forwarded: str | None = None) -> httpx.Response:
    headers = {"X-Forwarded-For": forwarded} if forwarded else {}
    return await http.post("/api/v1/login", json={"username": user, "password": password},
                           headers=headers)


def config_in(tmp_path: Path, **api: object) -> Any:
    return api_config(tmp_path / f"c{next(_n)}", **api)


# -- client addresses ------------------------------------------------------------------


def test_resolve_believes_forwarded_for_only_from_trusted_peers() -> None:
    trusted = networks(["127.0.0.1/32", "10.1.0.0/16"])
    assert resolve("203.0.113.9", ["1.2.3.4"], trusted) == "203.0.113.9"
    assert resolve("127.0.0.1", ["1.2.3.4"], ()) == "127.0.0.1"  # nothing trusted
    assert resolve("127.0.0.1", ["1.2.3.4"], trusted) == "1.2.3.4"
    # right-most untrusted: what the client wrote to the left is not believed
    assert resolve("127.0.0.1", ["6.6.6.6, 1.2.3.4, 10.1.2.3"], trusted) == "1.2.3.4"
    assert resolve("127.0.0.1", ["6.6.6.6", "1.2.3.4:5555"], trusted) == "1.2.3.4"
    assert resolve("127.0.0.1", ["10.1.0.7, 10.1.0.8"], trusted) == "10.1.0.7"  # all proxies
    assert resolve("127.0.0.1", [], trusted) == "127.0.0.1"
    assert resolve("::1", ["[2001:db8::1]:443"], networks(["::1"])) == "2001:db8::1"
    assert resolve(None, ["1.2.3.4"], trusted) == "unknown"


def test_trusted_proxies_are_checked_by_the_config() -> None:
    from pydantic import ValidationError

    from cheeto_like.config import ApiConfig

    assert ApiConfig(trusted_proxies=["10.0.0.0/8", "127.0.0.1"]).trusted_proxies == [
        "10.0.0.0/8", "127.0.0.1/32"]
    with pytest.raises(ValidationError, match="not an IP address or CIDR"):
        ApiConfig(trusted_proxies=["proxy.example.org"])
    assert uvicorn_options(ApiConfig(), "h", 1)["proxy_headers"] is False
    trusting = uvicorn_options(ApiConfig(trusted_proxies=["127.0.0.1"]), "h", 1)
    assert trusting["proxy_headers"] is True
    assert trusting["forwarded_allow_ips"] == ["127.0.0.1/32"]


async def test_a_spoofed_address_per_try_from_loopback_is_still_limited(world, tmp_path,  # type: ignore[no-untyped-def]
                                                                         api_log):
    config = config_in(tmp_path, login_max_failures=3)
    app = create_api(config, store=world)
    async with served(app, config) as url, httpx.AsyncClient(base_url=url) as http:
        for n in range(3):
            r = await login(http, "olga", "wrong", forwarded=f"198.51.100.{n}")
            assert r.status_code == 401
        r = await login(http, "olga", PASSWORDS["olga"], forwarded="198.51.100.99")
        assert r.status_code == 429 and int(r.headers["retry-after"]) > 0
    assert "from 127.0.0.1" in api_log.text and "198.51.100" not in api_log.text


async def test_forwarded_for_is_believed_from_a_trusted_proxy(world, tmp_path, api_log):  # type: ignore[no-untyped-def]
    config = config_in(tmp_path, login_max_failures=3, trusted_proxies=["127.0.0.1"])
    app = create_api(config, store=world)
    async with served(app, config) as url, httpx.AsyncClient(base_url=url) as http:
        for n in range(3):
            r = await login(http, "olga", "wrong", forwarded=f"6.6.6.6, 198.51.100.{n}")
            assert r.status_code == 401
        # a new address each time: the pair's count never reached 3
        r = await login(http, "olga", PASSWORDS["olga"], forwarded="198.51.100.99")
        assert r.status_code == 200, r.text
        for _ in range(3):
            await login(http, "olga", "wrong", forwarded="198.51.100.7")
        r = await login(http, "olga", PASSWORDS["olga"], forwarded="198.51.100.7")
        assert r.status_code == 429
    assert "refused for 'olga' from 198.51.100.0" in api_log.text
    assert "signed in: olga from 198.51.100.99" in api_log.text
    assert "6.6.6.6" not in api_log.text  # what the client wrote itself


# -- shared addresses, the dashboard, two servers --------------------------------------


async def test_a_colleague_behind_a_shared_address_is_not_refused(world, tmp_path):  # type: ignore[no-untyped-def]
    """dave's four bad passwords on the login node (the API's default limit is five)
    do not stop carol, who has none; dave himself is refused after his fifth."""
    from cheeto_like.operations.user import SetUserPassword
    from tests.factories import AUTHOR

    await SetUserPassword.run(world, AUTHOR, name="carl", password="carl-pw")
    config = config_in(tmp_path)
    app = create_api(config, store=world)
    async with served(app, config) as url, httpx.AsyncClient(base_url=url) as http:
        for _ in range(4):
            assert (await login(http, "dave", "wrong")).status_code == 401
        assert (await login(http, "carl", "carl-pw")).status_code == 200
        assert (await login(http, "dave", "wrong")).status_code == 401
        assert (await login(http, "dave", "wrong")).status_code == 429
        assert (await login(http, "carl", "carl-pw")).status_code == 200


async def test_the_dashboard_counts_with_the_same_limiter(world, tmp_path):  # type: ignore[no-untyped-def]
    """Failures on the dashboard's form and on /api/v1/login are one count."""
    config = config_in(tmp_path, login_max_failures=3)
    app = create_api(config, store=world)
    csrf = "A" * 43
    async with served(app, config) as url, httpx.AsyncClient(base_url=url) as http:

        async def form(user: str, password: str) -> httpx.Response:
            return await http.post("/login", data={"username": user, "password": password,
                                                   "csrf": csrf},
                                   headers={"Cookie": f"cheeto_login_csrf={csrf}"})

        assert (await form("olga", "wrong")).status_code == 401
        assert (await form("olga", "wrong")).status_code == 401
        assert (await login(http, "olga", "wrong")).status_code == 401
        refused = await form("olga", PASSWORDS["olga"])
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0
        assert "too many failed sign-ins" in refused.text
        assert (await login(http, "olga", PASSWORDS["olga"])).status_code == 429
        assert (await form("adam", PASSWORDS["adam"])).status_code == 303  # a colleague


async def test_two_api_servers_on_one_store_add_up_failures(world, tmp_path, mongo_config,  # type: ignore[no-untyped-def]
                                                            request):
    """Two apps, each on its own connection to the store and its own uvicorn, as two API
    processes: two failures on one and one on the other reach the limit of three."""
    from tests.conftest import module_database

    other: Store = await connect(mongo_config, database=module_database(request),
                                 autostart=False, create_indexes=False)
    try:
        config = config_in(tmp_path, login_max_failures=3)
        first, second = create_api(config, store=world), create_api(config, store=other)
        async with served(first, config) as one, served(second, config) as two, \
                httpx.AsyncClient(base_url=one) as a, httpx.AsyncClient(base_url=two) as b:
            assert (await login(a, "olga", "wrong")).status_code == 401
            assert (await login(b, "olga", "wrong")).status_code == 401
            assert (await login(a, "olga", PASSWORDS["olga"])).status_code == 200
            for http in (a, a, b):
                assert (await login(http, "olga", "wrong")).status_code == 401
            assert (await login(a, "olga", PASSWORDS["olga"])).status_code == 429
            assert (await login(b, "olga", PASSWORDS["olga"])).status_code == 429
    finally:
        await world.bind(create_indexes=False)  # connect bound the models to `other`
        await other.close()


# -- request bodies --------------------------------------------------------------------


def _raw(url: str, head: str, chunks: list[bytes]) -> tuple[int, bytes, int]:
    """Send ``head`` then as many of ``chunks`` as the server takes, then read the
    answer: (status, body, chunks sent before the answer came)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(head.encode())
        sent = 0
        sock.settimeout(0.2)
        answer = b""
        for chunk in chunks:
            try:
                answer += sock.recv(65536)
            except TimeoutError:
                pass
            if answer:
                break
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += 1
        sock.settimeout(20)
        while b"\r\n\r\n" not in answer or len(answer.split(b"\r\n\r\n", 1)[1]) < 40:
            more = sock.recv(65536)
            if not more:
                break
            answer += more
    head_text, _, body = answer.partition(b"\r\n\r\n")
    return int(head_text.split(b" ")[1]), body, sent


async def test_large_bodies_are_413_before_they_are_read(world, tmp_path):  # type: ignore[no-untyped-def]
    config = config_in(tmp_path)
    app = create_api(config, store=world)
    async with served(app, config) as url:
        # Content-Length of 64 MiB and no body at all: answered at once
        head = ("POST /api/v1/login HTTP/1.1\r\nHost: api\r\nContent-Type: application/json"
                f"\r\nContent-Length: {64 << 20}\r\n\r\n")
        status, body, _ = await asyncio.to_thread(_raw, url, head, [b"{"] * 5)
        assert status == 413
        problem = json.loads(body)
        assert problem["status"] == 413 and "1048576" in problem["detail"]
        assert problem["instance"] == "/api/v1/login"
        # chunked, never finished: 20 chunks of 128 KiB on offer (2.5 MiB), answered
        # once past 1 MiB, before the client has sent them all
        chunk = 128 * 1024
        chunks = [f"{chunk:x}\r\n".encode() + b" " * chunk + b"\r\n" for _ in range(20)]
        head = ("POST /api/v1/login HTTP/1.1\r\nHost: api\r\nContent-Type: application/json"
                "\r\nTransfer-Encoding: chunked\r\n\r\n")
        status, body, sent = await asyncio.to_thread(_raw, url, head, chunks)
        assert status == 413 and json.loads(body)["status"] == 413, body
        assert sent < 20
        async with httpx.AsyncClient(base_url=url) as http:
            # a normal request still works; a body just under the cap is read (and
            # refused by the schema), the dashboard's forms keep their own cap
            assert (await login(http, "adam", PASSWORDS["adam"])).status_code == 200
            padded = json.dumps({"username": "adam", "password": "x", "pad": " " * 900_000})
            r = await http.post("/api/v1/login", content=padded,
                                headers={"Content-Type": "application/json"})
            assert r.status_code == 422
            r = await http.post("/login", content=b"x" * 200_000,
                                headers={"Content-Type": "application/x-www-form-urlencoded"})
            assert r.status_code == 413  # the dashboard's own answer: a page, not a problem
            assert r.headers["content-type"].startswith("text/html")


async def test_the_store_hash_path_checks_one_hash_for_an_unknown_name(world, tmp_path,  # type: ignore[no-untyped-def]
                                                                      monkeypatch):
    """Without a directory, an unknown name is checked against the decoy hash: one
    yescrypt verification either way (a wrapper calling the real function counts)."""
    from cheeto_like import credentials

    real = credentials.verify_password
    checked: list[bool] = []

    def counting(password: str, hashed: str) -> bool:
        checked.append(real(password, hashed))
        return checked[-1]

    monkeypatch.setattr(credentials, "verify_password", counting)
    config = config_in(tmp_path)
    app = create_api(config, store=world)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://api") as http:
        for user in ("alice", "nobody-here"):
            assert (await login(http, user, "guess")).status_code == 401
    assert checked == [False, False]

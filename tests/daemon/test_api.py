"""The REST API in process (httpx.ASGITransport) on the golden ``farm`` site.

Covers the key check (401 before anything else), site resolution by name, fqdn and alias
(case-insensitive), 404 for unknown sites (no global fallback), JSON vs text by
``Accept``, the storage export, /healthz, the prefix, the --insecure mode (storage map
only), cache deadlines, and that reads
write nothing. The same app under a live uvicorn is in ``test_api_live.py``.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError
from pymongo import AsyncMongoClient
from ruamel.yaml import YAML

from cheeto_like import __version__
from cheeto_like.config import ApiConfig, Config, MongoConfig
from cheeto_like.models import History
from cheeto_like.operations.site import AddSiteAlias
from cheeto_like.store import Store
from cheeto_like.web.app import (
    Expiring,
    ExportCache,
    check_bind,
    create_api,
    is_loopback,
    prefers_text,
    uvicorn_options,
)
from tests.exports.test_golden import seed
from tests.factories import AUTHOR, make_site

KEY = "test-api-key-0123456789-abcdefghijklmnop"
GOLDEN = Path(__file__).parent.parent / "exports" / "golden"
ROOT_TEXT = (GOLDEN / "farm.root.pub").read_text()
STORAGE = YAML(typ="safe").load((GOLDEN / "farm.storage.yaml").read_text())
ROOT_LIST = [line for line in ROOT_TEXT.splitlines() if not line.startswith("#")]


@pytest.fixture(scope="module")
async def seeded(store: Store) -> Store:
    from tests.conftest import seed_access_status, wipe

    await wipe()
    await seed_access_status()
    await seed(store)
    await AddSiteAlias.run(store, AUTHOR, site="farm", alias="caesfarm")
    await make_site(store, "peak", "peak.example.org")  # a site with no admins
    return store


def client_for(store: Store, **api: object) -> httpx.AsyncClient:
    config = Config(mongo=MongoConfig(), api=ApiConfig(**api))  # type: ignore[arg-type]
    app = create_api(config, store=store)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api")


@pytest.fixture
async def client(seeded: Store) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(seeded, api_key=KEY) as http:
        yield http


AUTH = {"X-API-Key": KEY}
JSON = {**AUTH, "Accept": "application/json"}
TEXT = {**AUTH, "Accept": "text/plain"}


# -- the key ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/puppet/root-keys/farm", "/puppet/storage/farm",
                                  "/puppet/root-keys/nowhere"])
@pytest.mark.parametrize("headers", [{}, {"X-API-Key": ""}, {"X-API-Key": "wrong"},
                                     {"X-API-Key": KEY + "x"}, {"X-API-Key": KEY[:-1]},
                                     {"X-API-Key": "clé-é".encode("latin-1")},
                                     {"x-api-key": KEY.upper()}])
async def test_missing_or_wrong_key_is_401(client, path, headers):
    r = await client.get(path, headers=headers)
    assert r.status_code == 401
    assert r.json() == {"detail": "invalid or missing API key"}
    assert r.headers["www-authenticate"] == "X-API-Key"


async def test_a_non_ascii_key_works(seeded):
    async with client_for(seeded, api_key="clé-secrète-ünïcode-0123456789abcdef") as http:
        good = {"X-API-Key": "clé-secrète-ünïcode-0123456789abcdef".encode()}
        assert (await http.get("/puppet/root-keys/farm", headers=good)).status_code == 200
        bad = {"X-API-Key": "clé-secrète-ünïcode-0123456789abcdef".encode("latin-1")}
        assert (await http.get("/puppet/root-keys/farm", headers=bad)).status_code == 401


async def test_header_name_is_case_insensitive(client):
    r = await client.get("/puppet/root-keys/farm", headers={"x-api-key": KEY})
    assert r.status_code == 200


# -- root keys ----------------------------------------------------------------------------


@pytest.mark.parametrize("accept", [None, "*/*", "application/json"])
async def test_root_keys_json_by_default(client, accept):
    """The reference always answers JSON, and puppet code is written against it."""
    headers = AUTH if accept is None else {**AUTH, "Accept": accept}
    r = await client.get("/puppet/root-keys/farm", headers=headers)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {"root-ssh-public-keys": ROOT_LIST}
    assert r.headers["vary"] == "Accept"
    assert r.headers["cache-control"] == "no-store"


async def test_root_keys_text_when_asked(client):
    r = await client.get("/puppet/root-keys/farm", headers=TEXT)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    assert r.text == ROOT_TEXT


@pytest.mark.parametrize(("accept", "text"), [
    (None, False), ("*/*", False), ("text/plain", True), ("text/*", True),
    ("application/json", False), ("application/*", False),
    ("text/plain;q=0.5, application/json", False),
    ("application/json;q=0.1, text/plain", True),
    ("application/json, text/plain", False),  # a tie keeps the default (JSON)
    ("text/plain;q=0.9, */*;q=0.1", True),
    ("text/html", False), ("text/plain;q=bogus", False), ("", False),
    ("text/plain;q=0, */*", False),
])
def test_accept_negotiation(accept, text):
    assert prefers_text(accept) is text


@pytest.mark.parametrize("value", ["farm", "FARM", "farm.hpc.example.org",
                                   "Farm.HPC.example.org", "caesfarm", "CaesFarm"])
async def test_site_by_name_fqdn_or_alias(client, value):
    text = await client.get(f"/puppet/root-keys/{value}", headers=TEXT)
    assert (text.status_code, text.text) == (200, ROOT_TEXT)
    data = await client.get(f"/puppet/root-keys/{value}", headers=JSON)
    assert data.json() == {"root-ssh-public-keys": ROOT_LIST}
    storage = await client.get(f"/puppet/storage/{value}", headers=AUTH)
    assert (storage.status_code, storage.json()) == (200, STORAGE)


async def test_site_without_admins_has_no_keys(client):
    r = await client.get("/puppet/root-keys/peak", headers=TEXT)
    assert (r.status_code, r.text) == (200, "")
    r = await client.get("/puppet/root-keys/peak", headers=JSON)
    assert r.json() == {"root-ssh-public-keys": []}


@pytest.mark.parametrize("kind", ["root-keys", "storage"])
@pytest.mark.parametrize("value", ["nowhere", "farm.example.org", "farmx", "a b", "-farm",
                                   "x" * 300, "%00", "ünïcode", "farm..org", "farm;drop"])
async def test_unknown_site_is_404_never_the_global_set(client, kind, value):
    r = await client.get(f"/puppet/{kind}/{value}", headers=AUTH | {"Accept": "*/*"})
    assert r.status_code == 404
    assert r.json()["detail"].startswith("unknown site ")
    assert "ssh-ed25519" not in r.text


async def test_unknown_site_message(client):
    r = await client.get("/puppet/root-keys/nowhere", headers=AUTH)
    assert r.json() == {"detail": "unknown site 'nowhere'"}


# -- storage, health, schema ----------------------------------------------------------------


async def test_storage_export(client):
    r = await client.get("/puppet/storage/farm", headers=AUTH)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.json() == STORAGE


async def test_storage_of_an_empty_site(client):
    r = await client.get("/puppet/storage/peak", headers=AUTH)
    empty = {"user": {}, "group": {}, "share": {}}
    assert r.json() == {"zfs": empty, "nfs": empty}


async def test_healthz_needs_no_key(client):
    r = await client.get("/healthz")
    assert (r.status_code, r.json()) == (200, {"status": "ok", "version": __version__})


async def test_healthz_503_when_the_store_does_not_answer(seeded):
    dead = AsyncMongoClient("mongodb://127.0.0.1:9/?directConnection=true",
                            serverSelectionTimeoutMS=200, connectTimeoutMS=200)
    store = Store(client=dead, database=dead["nothing"], description="dead")
    try:
        async with client_for(store, api_key=KEY) as http:
            r = await http.get("/healthz")
    finally:
        await dead.close()
    assert r.status_code == 503
    # no key is needed for /healthz, so it must not map the network behind the API
    assert r.json() == {"status": "unavailable", "version": __version__,
                        "detail": "the store does not answer"}
    assert "127.0.0.1" not in r.text and ":9" not in r.text


async def test_openapi_document(client):
    r = await client.get("/openapi.json")
    assert r.status_code == 200
    doc = r.json()
    assert doc["info"]["title"] == "cheeto"
    # the API writes (/api/v1, the dashboard): its description no longer says read-only
    assert "read-only" not in doc["info"]["description"].lower()
    assert "writes" in doc["info"]["description"]
    legacy = {"/puppet/root-keys/{site}", "/puppet/storage/{site}", "/healthz"}
    assert legacy <= set(doc["paths"])
    assert all(p.startswith("/api/v1/") for p in set(doc["paths"]) - legacy)
    schemes = doc["components"]["securitySchemes"]
    assert schemes["APIKeyHeader"]["in"] == "header"
    assert schemes["APIKeyHeader"]["name"] == "X-API-Key"
    root = doc["paths"]["/puppet/root-keys/{site}"]["get"]["responses"]
    assert set(root["200"]["content"]) == {"text/plain", "application/json"}
    assert {"401", "404"} <= set(root)
    assert (await client.get("/docs")).status_code == 200


@pytest.mark.parametrize(("prefix", "root_path"), [("", ""), ("cheeto", ""), ("", "proxied")])
async def test_docs_work_offline(seeded, prefix, root_path):
    """/docs names no outside host: Swagger UI's script, style and icon are served by the
    API itself (under the prefix and behind a proxy's root_path too)."""
    app = create_api(Config(api=ApiConfig(api_key=KEY, prefix=prefix)), store=seeded)
    transport = httpx.ASGITransport(app=app, root_path=f"/{root_path}" if root_path else "")
    base = "".join(f"/{part}" for part in (root_path, prefix) if part)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
        r = await http.get(f"{base}/docs")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        hosts = re.findall(r"(?:https?:)?//[A-Za-z0-9.-]+", r.text)
        assert hosts == [], hosts
        assets = re.findall(r'(?:src|href)="([^"]+)"', r.text)
        assert len(assets) == 3 and all(a.startswith(f"{base}/static/swagger-ui/")
                                        for a in assets)
        assert f"url: '{base}/openapi.json'" in r.text
        assert '"validatorUrl": null' in r.text
        for asset in assets:
            served = await http.get(asset)
            assert served.status_code == 200, asset
            assert len(served.content) > 500
        js = await http.get(f"{base}/static/swagger-ui/swagger-ui-bundle.js")
        assert b"SwaggerUIBundle" in js.content
        assert (await http.get(f"{base}/openapi.json")).status_code == 200


async def test_reads_write_no_history(client):
    before = await History.find_all().count()
    for path in ("/puppet/root-keys/farm", "/puppet/storage/caesfarm", "/puppet/root-keys/x",
                 "/healthz"):
        await client.get(path, headers=JSON)
    assert await History.find_all().count() == before


# -- prefix, open mode -------------------------------------------------------------------


async def test_prefix_mounts_everything_under_it(seeded):
    async with client_for(seeded, api_key=KEY, prefix="cheeto/") as http:
        r = await http.get("/cheeto/puppet/root-keys/farm", headers=TEXT)
        assert (r.status_code, r.text) == (200, ROOT_TEXT)
        assert (await http.get("/puppet/root-keys/farm", headers=AUTH)).status_code == 404
        assert (await http.get("/cheeto/puppet/storage/farm")).status_code == 401
        assert (await http.get("/cheeto/healthz")).status_code == 200
        doc = (await http.get("/cheeto/openapi.json")).json()
        assert "/cheeto/puppet/storage/{site}" in doc["paths"]
        assert (await http.get("/openapi.json")).status_code == 404


async def test_root_path_is_advertised(seeded):
    """uvicorn passes api.root_path in the ASGI scope (see uvicorn_options)."""
    app = create_api(Config(api=ApiConfig(api_key=KEY, root_path="proxied")), store=seeded)
    assert uvicorn_options(ApiConfig(root_path="proxied"), "h", 1)["root_path"] == "/proxied"
    transport = httpx.ASGITransport(app=app, root_path="/proxied")
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
        doc = (await http.get("/proxied/openapi.json")).json()
        assert doc["servers"] == [{"url": "/proxied"}]
        r = await http.get("/proxied/puppet/root-keys/farm", headers=TEXT)
        assert (r.status_code, r.text) == (200, ROOT_TEXT)


async def test_without_a_static_key_nothing_is_anonymous(seeded):
    """No api.api_key and no --insecure: the puppet routes want a managed key or a token
    (issue 23: the API starts so, and is not open)."""
    async with client_for(seeded) as http:
        for path in ("/puppet/root-keys/farm", "/puppet/storage/farm"):
            r = await http.get(path, headers={"Accept": "text/plain"})
            assert (r.status_code, r.json()) == (401, {"detail": "invalid or missing API key"})


def insecure_client(store: Store, **api: object) -> httpx.AsyncClient:
    config = Config(mongo=MongoConfig(), api=ApiConfig(**api))  # type: ignore[arg-type]
    app = create_api(config, store=store, insecure=True)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api")


async def test_insecure_opens_the_storage_map_never_root_keys(seeded):
    async with insecure_client(seeded) as http:
        r = await http.get("/puppet/storage/farm")
        assert r.status_code == 200 and r.json() == STORAGE
        assert (await http.get("/puppet/storage/nowhere")).status_code == 404
        r = await http.get("/puppet/root-keys/farm", headers={"Accept": "text/plain"})
        assert (r.status_code, r.json()) == (401, {"detail": "invalid or missing API key"})
    # a configured credential means the deployment wants one: --insecure opens nothing
    for api in ({"api_key": KEY}, {"managed_keys_only": True}):
        async with insecure_client(seeded, **api) as http:
            assert (await http.get("/puppet/storage/farm")).status_code == 401
    async with insecure_client(seeded, api_key=KEY) as http:
        r = await http.get("/puppet/root-keys/farm", headers=TEXT)
        assert (r.status_code, r.text) == (200, ROOT_TEXT)


# -- binding rules and config -----------------------------------------------------------


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.1.2.3", True), ("localhost", True), ("LOCALHOST", True),
    ("::1", True), ("[::1]", True), ("0.0.0.0", False), ("::", False), ("10.0.0.5", False),
    ("api.example.org", False), ("", False),
])
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_the_api_starts_without_a_static_key():
    """Nothing is refused (managed keys and sign-in exist); the start-up line says what a
    caller needs, and warns when --insecure opens the storage map off loopback."""
    assert check_bind(ApiConfig(), "0.0.0.0", insecure=False) == (
        "a managed key (ng apikey) or a token required")
    assert check_bind(ApiConfig(api_key=KEY), "0.0.0.0",  # type: ignore[arg-type]
                      insecure=True).endswith("deprecated api.api_key required")
    assert check_bind(ApiConfig(), "127.0.0.1", insecure=True) == (
        "open: the storage map is readable without a credential; root keys still need one")
    assert "to anyone who can reach 0.0.0.0" in check_bind(ApiConfig(), "0.0.0.0",
                                                           insecure=True)
    assert check_bind(ApiConfig(managed_keys_only=True), "0.0.0.0", insecure=True) == (
        "a managed key (ng apikey) or a token required")


@pytest.mark.parametrize("key", ["k" * 31, " " * 40, "short"])
def test_short_api_key_is_refused(key):
    with pytest.raises(ValidationError, match="shorter than 32 characters"):
        ApiConfig(api_key=key)  # type: ignore[arg-type]
    ApiConfig(api_key="k" * 32)  # type: ignore[arg-type]


@pytest.mark.parametrize(("given", "normal"), [
    ("", ""), ("/", ""), ("cheeto", "/cheeto"), ("cheeto/", "/cheeto"), ("/a/b/", "/a/b"),
])
def test_prefix_is_normalised(given, normal):
    assert ApiConfig(prefix=given).prefix == normal
    assert ApiConfig(root_path=given).root_path == normal


@pytest.mark.parametrize("bad", [{"prefix": "a b"}, {"prefix": "a//b"}, {"api_key": "  "},
                                 {"tls_cert": "/x.crt"}, {"tls_key": "/x.key"}])
def test_bad_api_config(bad):
    with pytest.raises(ValidationError):
        ApiConfig(**bad)


# -- the export cache -----------------------------------------------------------------------


async def test_export_cache_computes_once_per_ttl_and_once_at_a_time():
    calls = 0
    gate = asyncio.Event()

    async def compute() -> int:
        nonlocal calls
        calls += 1
        await gate.wait()
        return calls

    cache = ExportCache(60)
    waiting = [asyncio.create_task(cache.get(("storage", "farm"), compute)) for _ in range(5)]
    await asyncio.sleep(0.01)
    gate.set()
    results = await asyncio.gather(*waiting)
    assert calls == 1 and sorted(results) == [(1, "hit")] * 4 + [(1, "miss")]
    assert await cache.get(("storage", "farm"), compute) == (1, "hit")
    assert await cache.get(("storage", "peak"), compute) == (2, "miss")  # another key
    uncached = ExportCache(0)
    assert [await uncached.get(("k", "s"), compute) for _ in range(2)] == [(3, "miss"),
                                                                          (4, "miss")]


async def test_an_entry_past_its_deadline_is_never_served():
    """A body built with ``Expiring(at=…)`` (the soonest expiry it includes) is rebuilt
    before answering once ``at`` passes, although no generation moved and ``ttl`` is far
    off: stale-while-revalidate would hand out an expired root key once more."""
    calls = 0

    async def compute() -> Expiring:
        nonlocal calls
        calls += 1
        return Expiring(calls, time.time() + 0.3 if calls == 1 else None)

    cache = ExportCache(3600)
    assert await cache.get(("root-keys", "farm"), compute) == (1, "miss")
    assert await cache.get(("root-keys", "farm"), compute) == (1, "hit")
    await asyncio.sleep(0.35)
    assert await cache.get(("root-keys", "farm"), compute) == (2, "miss")  # waited for it
    assert await cache.get(("root-keys", "farm"), compute) == (2, "hit")  # no deadline now
    assert calls == 2


async def test_export_cache_serves_stale_while_one_refresh_runs():
    calls = 0

    async def compute() -> int:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.05)
        return calls

    cache = ExportCache(0.2)
    assert await cache.get(("root-keys", "farm"), compute) == (1, "miss")
    await asyncio.sleep(0.25)  # past the ttl, within twice it
    stale = [await cache.get(("root-keys", "farm"), compute) for _ in range(3)]
    assert stale == [(1, "stale")] * 3  # no request waited; one refresh started
    await asyncio.sleep(0.1)
    assert await cache.get(("root-keys", "farm"), compute) == (2, "hit")
    assert calls == 2
    await asyncio.sleep(0.45)  # however old: the previous body, while one rebuild runs
    assert await cache.get(("root-keys", "farm"), compute) == (2, "stale")
    await asyncio.sleep(0.1)
    assert await cache.get(("root-keys", "farm"), compute) == (3, "hit")
    await cache.close()


async def test_export_cache_rebuilds_when_the_generation_moves_never_making_a_client_wait():
    generations = {"all": 1, "site:farm": 1, "site:peak": 1}
    reads = 0

    async def read() -> dict[str, int]:
        nonlocal reads
        reads += 1
        return dict(generations)

    calls = 0
    gate = asyncio.Event()

    async def compute() -> int:
        nonlocal calls
        calls += 1
        await gate.wait()
        return calls

    cache = ExportCache(3600, poll=0, read_generations=read)
    gate.set()
    assert await cache.get(("storage", "farm"), compute) == (1, "miss")
    assert await cache.get(("storage", "peak"), compute) == (2, "miss")
    assert await cache.get(("storage", "farm"), compute) == (1, "hit")
    generations["site:farm"] = 2  # an operation touched farm
    gate.clear()
    outdated = [await cache.get(("storage", "farm"), compute) for _ in range(3)]
    assert outdated == [(1, "stale")] * 3  # nobody waits; one rebuild started
    assert await cache.get(("storage", "peak"), compute) == (2, "hit")  # other sites keep
    gate.set()
    await asyncio.sleep(0.01)
    assert await cache.get(("storage", "farm"), compute) == (3, "hit")
    generations["all"] = 2  # an operation that can reach every site
    assert await cache.get(("storage", "peak"), compute) == (2, "stale")
    await asyncio.sleep(0.01)
    assert await cache.get(("storage", "peak"), compute) == (4, "hit")
    assert calls == 4
    await cache.close()


async def test_during_a_rebuild_every_request_gets_the_previous_body_from_one_builder():
    """A burst of requests while a slow rebuild runs: none waits for it (each answers
    within a few ms with the previous body), and exactly one build runs."""
    generations = {"all": 1}
    builds = 0
    release = asyncio.Event()

    async def read() -> dict[str, int]:
        return dict(generations)

    async def compute() -> str:
        nonlocal builds
        builds += 1
        if builds > 1:
            await release.wait()  # the rebuild is slow
        return f"body {builds}"

    cache = ExportCache(3600, poll=0, read_generations=read)
    assert await cache.get(("storage", "farm"), compute) == ("body 1", "miss")
    generations["all"] = 2  # a write committed
    burst = await asyncio.wait_for(
        asyncio.gather(*(cache.get(("storage", "farm"), compute) for _ in range(50))),
        timeout=5)  # would hang on ``release`` if any request waited for the rebuild
    assert set(burst) == {("body 1", "stale")}
    assert builds == 2  # one builder for the whole burst
    release.set()
    for _ in range(100):
        if (await cache.get(("storage", "farm"), compute))[1] == "hit":
            break
        await asyncio.sleep(0.01)
    assert await cache.get(("storage", "farm"), compute) == ("body 2", "hit")
    assert builds == 2
    await cache.close()


async def test_a_write_during_a_rebuild_triggers_another_rebuild():
    """The rebuild is tagged with the generation read before it started, so a write that
    lands while it runs is not lost behind it."""
    generations = {"all": 1}
    started = asyncio.Event()
    release = asyncio.Event()
    builds = 0

    async def read() -> dict[str, int]:
        return dict(generations)

    async def compute() -> int:
        nonlocal builds
        builds += 1
        if builds == 2:
            started.set()
            await release.wait()
        return builds

    cache = ExportCache(3600, poll=0, read_generations=read)
    assert await cache.get(("root-keys", "farm"), compute) == (1, "miss")
    generations["all"] = 2
    assert await cache.get(("root-keys", "farm"), compute) == (1, "stale")
    await started.wait()
    generations["all"] = 3  # lands during the rebuild from generation 2
    release.set()
    await asyncio.sleep(0.01)
    assert await cache.get(("root-keys", "farm"), compute) == (2, "stale")  # outdated again
    await asyncio.sleep(0.01)
    assert await cache.get(("root-keys", "farm"), compute) == (3, "hit")
    await cache.close()


async def test_export_cache_reads_the_generations_once_per_poll():
    reads = 0

    async def read() -> dict[str, int]:
        nonlocal reads
        reads += 1
        await asyncio.sleep(0.01)
        return {"all": reads}

    async def compute() -> str:
        return "body"

    cache = ExportCache(3600, poll=60, read_generations=read)
    results = await asyncio.gather(*(cache.get(("storage", "farm"), compute)
                                     for _ in range(20)))
    assert reads == 1 and {r[0] for r in results} == {"body"}
    assert await cache.get(("storage", "farm"), compute) == ("body", "hit")
    assert reads == 1
    await cache.close()


async def test_the_background_read_rebuilds_a_changed_site_without_a_request_waiting():
    """With ``poll > 0`` no request reads the generations itself: one that finds the last
    read older than ``poll`` starts a background read, which starts the rebuild of a
    moved site at once; the next request gets the new body as a hit."""
    generations = {"all": 1, "site:farm": 1}
    reads = 0
    builds = 0

    async def read() -> dict[str, int]:
        nonlocal reads
        reads += 1
        return dict(generations)

    async def compute() -> int:
        nonlocal builds
        builds += 1
        return builds

    cache = ExportCache(3600, poll=0.02, read_generations=read)
    assert await cache.get(("storage", "farm"), compute) == (1, "miss")
    generations["site:farm"] = 2  # a write to farm
    await asyncio.sleep(0.05)
    assert reads == 1  # nothing polls while nobody asks
    assert await cache.get(("storage", "farm"), compute) == (1, "hit")  # last answer
    for _ in range(200):
        await asyncio.sleep(0.01)
        if builds == 2:
            break
    assert (reads, builds) == (2, 2)
    assert await cache.get(("storage", "farm"), compute) == (2, "hit")
    await cache.close()


async def test_a_failed_generations_read_keeps_the_cache_serving():
    generations: dict[str, int] | None = {"all": 1}

    async def read() -> dict[str, int]:
        if generations is None:
            raise ConnectionError("store down")
        return dict(generations)

    async def compute() -> str:
        return "body"

    cache = ExportCache(3600, poll=0.01, read_generations=read)
    assert await cache.get(("storage", "farm"), compute) == ("body", "miss")
    generations = None
    for _ in range(3):  # each starts a background read that fails (and is logged)
        await asyncio.sleep(0.02)
        assert await cache.get(("storage", "farm"), compute) == ("body", "hit")
    await cache.close()


async def test_export_cache_does_not_keep_failures():
    cache = ExportCache(60)
    attempts = 0

    async def flaky() -> str:
        nonlocal attempts
        attempts += 1
        await asyncio.sleep(0.01)
        if attempts == 1:
            raise RuntimeError("store hiccup")
        return "ok"

    first = asyncio.create_task(cache.get(("root-keys", "farm"), flaky))
    second = asyncio.create_task(cache.get(("root-keys", "farm"), flaky))
    for task in (first, second):  # the waiter shares the failure of the one in flight
        with pytest.raises(RuntimeError, match="store hiccup"):
            await task
    assert await cache.get(("root-keys", "farm"), flaky) == ("ok", "miss")


async def test_a_failed_background_refresh_keeps_the_stale_copy(caplog):
    cache = ExportCache(0.1)
    outcomes = iter(["first", RuntimeError("store down"), "third"])

    async def compute() -> str:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert await cache.get(("storage", "farm"), compute) == ("first", "miss")
    await asyncio.sleep(0.12)
    assert await cache.get(("storage", "farm"), compute) == ("first", "stale")
    await asyncio.sleep(0.01)  # the refresh failed in the background
    assert "refreshing storage for farm failed: store down" in caplog.text
    assert await cache.get(("storage", "farm"), compute) == ("first", "stale")
    await asyncio.sleep(0.01)
    assert await cache.get(("storage", "farm"), compute) == ("third", "hit")


async def test_cached_exports_and_their_headers(seeded):
    async with client_for(seeded, api_key=KEY, cache_seconds=60) as http:
        first = await http.get("/puppet/root-keys/farm", headers=AUTH)
        again = await http.get("/puppet/root-keys/caesfarm", headers=JSON)  # same site
        assert (first.headers["x-cache"], again.headers["x-cache"]) == ("miss", "hit")
        assert again.json() == {"root-ssh-public-keys": ROOT_LIST}
        storage = [await http.get("/puppet/storage/farm", headers=AUTH) for _ in range(2)]
        assert [r.headers["x-cache"] for r in storage] == ["miss", "hit"]
        assert storage[1].json() == STORAGE


async def test_a_write_bumps_the_generation_and_the_api_serves_the_new_body(seeded):
    """The write path bumps the data generation in the operation's transaction; the
    cached API serves the previous body once (while it rebuilds), then the new one,
    without waiting for ``cache_seconds``. Uncached clients see the change at once."""
    from cheeto_like.models import SshKey
    from cheeto_like.operations.user import AddUserSshKey, RemoveUserSshKey
    from cheeto_like.queries.generations import all_generations, site_generation

    extra = ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAcUIS47SFVib3yJlqOwvcrX5PH+CxglMj9MWWZzgI2b"
             " dave@spare")
    async with client_for(seeded, api_key=KEY, cache_seconds=3600,
                          generation_poll_seconds=0) as cached, \
            client_for(seeded, api_key=KEY, cache_seconds=0) as fresh:
        assert (await cached.get("/puppet/root-keys/farm", headers=TEXT)).text == ROOT_TEXT
        hit = await cached.get("/puppet/root-keys/farm", headers=TEXT)
        assert (hit.text, hit.headers["x-cache"]) == (ROOT_TEXT, "hit")
        before = site_generation(await all_generations(), "farm")
        await AddUserSshKey.run(seeded, AUTHOR, name="dave", key=extra)
        try:
            after = site_generation(await all_generations(), "farm")
            assert after > before  # a user's key is global: the every-site counter moved
            stale = await cached.get("/puppet/root-keys/farm", headers=TEXT)
            assert (stale.text, stale.headers["x-cache"]) == (ROOT_TEXT, "stale")
            for _ in range(100):  # the one rebuild runs in the background
                new = await cached.get("/puppet/root-keys/farm", headers=TEXT)
                if new.headers["x-cache"] == "hit":
                    break
                await asyncio.sleep(0.02)
            assert "dave@spare" in new.text and new.headers["x-cache"] == "hit"
            now = await fresh.get("/puppet/root-keys/farm", headers=TEXT)
            assert "dave@spare" in now.text and now.headers["x-cache"] == "miss"
        finally:
            key = await SshKey.find_one({"user": "dave", "key": extra})
            await RemoveUserSshKey.run(seeded, AUTHOR, name="dave", key_id=key.id)


async def test_an_operation_on_one_site_bumps_only_that_site(seeded):
    from cheeto_like.operations.site import AddSiteAlias, RemoveSiteAlias
    from cheeto_like.queries.generations import all_generations, site_generation

    before = await all_generations()
    await AddSiteAlias.run(seeded, AUTHOR, site="peak", alias="summit")
    try:
        after = await all_generations()
        assert site_generation(after, "peak") == (before.get("all", 0),
                                                  before.get("site:peak", 0) + 1)
        assert site_generation(after, "farm") == site_generation(before, "farm")
    finally:
        await RemoveSiteAlias.run(seeded, AUTHOR, site="peak", alias="summit")


async def test_a_failed_operation_bumps_no_generation(seeded):
    from cheeto_like.errors import CheetoError
    from cheeto_like.operations.site import AddSiteAlias
    from cheeto_like.queries.generations import all_generations

    before = await all_generations()
    with pytest.raises(CheetoError):  # the alias is already farm's
        await AddSiteAlias.run(seeded, AUTHOR, site="peak", alias="caesfarm")
    assert await all_generations() == before

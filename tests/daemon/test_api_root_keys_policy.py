"""Root keys follow ``queries.access_policy`` (issue 23), in ``cheeto ng site export
root-keys`` and in ``GET /puppet/root-keys/{site}`` of a live ``cheeto daemon api``
subprocess started with managed keys only (no static ``api.api_key``):

- an admin ``disabled``, ``inactive`` or ``offboarding``, globally or at the site, or past
  ``expires_at`` (the user's or the site record's), or holding only an expired key, is
  in neither;
- an expiry passing a few seconds into the test leaves the cached body by its deadline,
  although no write moved a generation and ``cache_seconds`` is an hour;
- anonymous callers get a 401 for root keys, also with ``--insecure`` (which opens only
  the storage map).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from cheeto_like.config import MongoConfig
from cheeto_like.models import SshKey, UserSiteInfo
from cheeto_like.operations.auth import CreateApiKey
from cheeto_like.operations.user import SetUserStatus
from cheeto_like.queries.exports import root_keys
from cheeto_like.store import Store
from tests.conftest import module_database
from tests.daemon.test_api_live import Server, write_config
from tests.factories import AUTHOR, make_site, make_user, reload_user

SITE = "rk"
STATUSES = ("disabled", "inactive", "offboarding")
PASSING_SECONDS = 4.0


def key_line(n: int) -> str:
    import base64
    import struct

    kind = b"ssh-ed25519"
    blob = struct.pack(">I", len(kind)) + kind + struct.pack(">I", 32) + n.to_bytes(32, "big")
    return f"ssh-ed25519 {base64.b64encode(blob).decode()} k{n}"


ADMINS = ["keep", *(f"g{s[:3]}" for s in STATUSES), *(f"s{s[:3]}" for s in STATUSES),
          "xuser", "xsite", "xkey", "passing"]


@pytest.fixture(scope="module")
async def world(store: Store) -> dict[str, object]:
    """One admin per case, each with root-ssh and a key of their own."""
    from tests.conftest import seed_access_status, wipe

    await wipe()
    await seed_access_status()
    await make_site(store, SITE)
    for n, name in enumerate(ADMINS, start=1):
        await make_user(store, name, site=SITE, type="admin", ssh_key=key_line(n),
                        access=["login-ssh", "root-ssh"])
    for status in STATUSES:
        await SetUserStatus.run(store, AUTHOR, name=f"g{status[:3]}", status=status,
                                reason="test")
        await SetUserStatus.run(store, AUTHOR, name=f"s{status[:3]}", status=status,
                                reason="test", site=SITE)
    past = datetime.now(UTC) - timedelta(hours=1)
    user = await reload_user("xuser")
    user.expires_at = past
    await user.save()
    usi = await UserSiteInfo.find_one({"user": "xsite", "site": SITE})
    assert usi is not None
    usi.expires_at = past
    await usi.save()
    key = await SshKey.find_one({"user": "xkey"})
    assert key is not None
    key.expires_at = past
    await key.save()
    made = await CreateApiKey.run(store, AUTHOR, name="puppet", scopes=["puppet:read"])
    return {"secret": made.secret}


def holders(text: str) -> list[str]:
    return [line.split()[1] for line in text.splitlines() if line.startswith("# ")]


async def set_passing(seconds: float) -> datetime:
    when = datetime.now(UTC) + timedelta(seconds=seconds)
    user = await reload_user("passing")
    user.expires_at = when
    await user.save()
    return when


async def test_the_export_holds_only_admins_who_may_log_in_now(world, cli):
    r = await cli("ng", "site", "export", "root-keys", "-s", SITE)
    assert r.code == 0, r.stderr
    assert holders(r.stdout) == ["keep", "passing"]
    found = await root_keys(SITE)
    assert [b.name for b in found.blocks] == ["keep", "passing"]
    assert found.stale_at is None  # nothing included expires
    when = await set_passing(3600)
    assert (await root_keys(SITE)).stale_at == when.replace(
        microsecond=when.microsecond // 1000 * 1000)


@pytest.fixture(scope="module")
def server(world: dict[str, object], mongo_config: MongoConfig,
           request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Managed keys only: no api_key, no managed_keys_only, no --insecure; an hour-long
    cache, so only a deadline can drop a body."""
    tmp = tmp_path_factory.mktemp("api-rk")
    config = write_config(tmp / "config.yaml", mongo_config, module_database(request),
                          cache_seconds=3600, generation_poll_seconds=0)
    srv = Server(config, tmp / "api.log").wait()
    try:
        yield srv
    finally:
        srv.stop()


def get(server: Server, path: str, **headers: str) -> httpx.Response:
    return httpx.get(f"{server.url}{path}", headers=headers, timeout=10)


async def test_live_root_keys_follow_status_and_expiry(world, server):
    key = {"X-API-Key": str(world["secret"]), "Accept": "text/plain"}
    when = await set_passing(PASSING_SECONDS)
    r = get(server, f"/puppet/root-keys/{SITE}", **key)
    assert r.status_code == 200, r.text
    assert holders(r.text) == ["keep", "passing"]
    r = get(server, f"/puppet/root-keys/{SITE}", **key)
    assert r.headers["x-cache"] == "hit" and holders(r.text) == ["keep", "passing"]
    # the JSON form is the same body's other rendering
    r = get(server, f"/puppet/root-keys/{SITE}", **{"X-API-Key": str(world["secret"])})
    assert len(r.json()["root-ssh-public-keys"]) == 2
    # no write happens when the expiry passes; the cached body goes at its deadline
    await asyncio.sleep(max(0.0, (when - datetime.now(UTC)).total_seconds()) + 0.2)
    r = get(server, f"/puppet/root-keys/{SITE}", **key)
    assert r.status_code == 200 and holders(r.text) == ["keep"]
    assert r.headers["x-cache"] == "miss"  # rebuilt before answering, never stale


def test_live_root_keys_refuse_anonymous_callers(world, server):
    for headers in ({}, {"X-API-Key": "nope"}):
        r = get(server, f"/puppet/root-keys/{SITE}", **headers)
        assert (r.status_code, r.json()) == (401, {"detail": "invalid or missing API key"})
    assert get(server, f"/puppet/storage/{SITE}").status_code == 401  # no --insecure


def test_live_insecure_opens_only_the_storage_map(world, mongo_config, request,
                                                  tmp_path: Path):
    config = write_config(tmp_path / "open.yaml", mongo_config, module_database(request))
    srv = Server(config, tmp_path / "api.log", "--insecure").wait()
    try:
        assert get(srv, f"/puppet/storage/{SITE}").status_code == 200
        r = get(srv, f"/puppet/root-keys/{SITE}", Accept="text/plain")
        assert r.status_code == 401
        r = get(srv, f"/puppet/root-keys/{SITE}",
                **{"X-API-Key": str(world["secret"]), "Accept": "text/plain"})
        assert r.status_code == 200 and holders(r.text)[0] == "keep"
    finally:
        srv.stop()
    log = (tmp_path / "api.log").read_text()
    assert "open: the storage map is readable without a credential" in log

"""The auth commands: ``ng role``, ``ng apikey``, ``token issue``/``revoke`` against the
store, and
the API client (``login``, ``me``, ``usage``, ``quota``, ``logout``) against a live
``cheeto daemon api``."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from cheeto_like.auth.apikeys import fingerprint
from cheeto_like.auth.tokens import TokenIssuer
from cheeto_like.config import ApiConfig, MongoConfig
from cheeto_like.models import ApiKey, History, User
from cheeto_like.store import Store
from tests.conftest import module_database
from tests.daemon.test_api_live import Server, write_config
from tests.web.conftest import PASSWORDS, STATIC_KEY, seed_world


@pytest.fixture(scope="module")
async def world(store: Store) -> Store:
    await seed_world(store)
    return store


@pytest.fixture(scope="module")
def setup(world: Store, mongo_config: MongoConfig, request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Server, Path]]:
    tmp = tmp_path_factory.mktemp("auth-cli")
    key_file = tmp / "jwt.key"
    config = write_config(tmp / "config.yaml", mongo_config, module_database(request),
                          api_key=STATIC_KEY, jwt_key_file=str(key_file),
                          key_use_flush_seconds=0.5)
    srv = Server(config, tmp / "api.log").wait()
    try:
        yield config, srv, key_file
    finally:
        srv.stop()


@pytest.fixture
def api_env(setup, monkeypatch, tmp_path):  # type: ignore[no-untyped-def]
    _, srv, _ = setup
    monkeypatch.setenv("CHEETO_API_URL", srv.url)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state" / "cheeto" / "token"


async def test_roles_from_the_cli(cli, setup):  # type: ignore[no-untyped-def]
    config = setup[0]
    r = await cli("ng", "role", "grant", "-u", "carl", "--role", "manager", "-A", "proj",
                  config=config)
    assert r.code == 0, r.stderr
    r = await cli("ng", "role", "list", "-u", "carl", "--json", config=config)
    assert r.json() == [{"user": "carl", "role": "manager", "accounts": ["proj"],
                         "via": "grant"}]
    r = await cli("ng", "role", "grant", "-u", "carl", "--role", "manager", config=config)
    assert r.code == 2 and "manager is granted one or more --account" in r.stderr
    r = await cli("ng", "role", "revoke", "-u", "carl", "--role", "manager", config=config)
    assert r.code == 0
    r = await cli("ng", "role", "revoke", "-u", "carl", "--role", "manager", config=config)
    assert r.code == 2 and "does not have the role" in r.stderr


async def test_apikey_lifecycle_from_the_cli(cli, setup):  # type: ignore[no-untyped-def]
    config = setup[0]
    r = await cli("ng", "apikey", "create", "--name", "cli-key", "--scope", "puppet:read",
                  "--expires-in", "90d", config=config)
    assert r.code == 0, r.stderr
    secret = r.stdout.strip()
    assert r.stdout == secret + "\n" and secret.startswith("ck_")  # nothing else on stdout
    assert secret not in r.stderr and secret[:11] in r.stderr
    key = await ApiKey.find_one({"name": "cli-key"})
    assert key is not None and key.fingerprint == fingerprint(secret)
    assert key.expires_epoch is not None
    r = await cli("ng", "apikey", "list", "--json", config=config)
    listed = next(k for k in r.json() if k["name"] == "cli-key")
    assert listed["prefix"] == secret[:11] and secret not in r.stdout
    r = await cli("ng", "apikey", "rotate", "--name", "cli-key", "--overlap-hours", "1",
                  config=config)
    assert r.code == 0 and r.stdout.strip() != secret
    r = await cli("ng", "apikey", "revoke", "--name", "cli-key", config=config)
    assert r.code == 2 and "--force" in r.stderr  # no terminal: refused
    r = await cli("ng", "apikey", "revoke", "--name", "cli-key", "--force", config=config)
    assert r.code == 0
    r = await cli("ng", "apikey", "audit", "--json", config=config)
    assert r.code == 0 and all(f["name"] != "cli-key" for f in r.json())
    r = await cli("ng", "apikey", "create", "--name", "x", "--scope", "root", config=config)
    assert r.code == 2


async def test_a_running_api_records_key_use_in_batches(cli, setup):  # type: ignore[no-untyped-def]
    """The live server's flush task writes last use (every api.key_use_flush_seconds,
    0.5 s here), so ``ng apikey list`` shows it without a write per request."""
    import asyncio

    import httpx

    config, srv, _ = setup
    r = await cli("ng", "apikey", "create", "--name", "live-reader", "--scope", "api:read",
                  config=config)
    secret = r.stdout.strip()
    async with httpx.AsyncClient() as http:
        for _ in range(5):
            r = await http.get(f"{srv.url}/api/v1/sites", headers={"X-API-Key": secret})
            assert r.status_code == 200
    for _ in range(50):
        key = await ApiKey.find_one({"name": "live-reader"})
        if key is not None and key.last_used_epoch is not None:
            break
        await asyncio.sleep(0.1)
    assert key is not None and key.last_used_epoch is not None
    r = await cli("ng", "apikey", "list", "--json", config=config)
    listed = next(k for k in r.json() if k["name"] == "live-reader")
    assert listed["last_used_epoch"] == key.last_used_epoch, listed


async def test_token_issue(cli, setup, world):  # type: ignore[no-untyped-def]
    config, _, key_file = setup
    r = await cli("token", "issue", "-u", "alice", "--ttl", "2h", config=config)
    assert r.code == 0, r.stderr
    token = r.stdout.strip()
    claims = TokenIssuer.from_config(ApiConfig(jwt_key_file=key_file)).verify(token)
    alice = await User.find_one({"name": "alice"})
    assert alice is not None
    assert (claims.sub, claims.ver) == (alice.id, alice.token_version)  # an id, not a login
    assert claims.exp - claims.iat == 7200
    assert token not in r.stderr
    # the live API takes it, as alice
    import httpx

    async with httpx.AsyncClient() as http:
        r = await http.get(f"{setup[1].url}/api/v1/me",
                           headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200 and r.json()["name"] == "alice"
    r = await cli("token", "issue", "-u", "ghost", config=config)
    assert r.code == 2 and r.stdout == ""
    from cheeto_like.operations.user import SetUserStatus

    await SetUserStatus.run(world, "tester", name="dave", status="disabled", reason="left")
    r = await cli("token", "issue", "-u", "dave", config=config)
    assert r.code == 2 and "not active" in r.stderr and r.stdout == ""


async def test_token_revoke_ends_a_persons_tokens(cli, setup):  # type: ignore[no-untyped-def]
    """``cheeto token revoke -u bob``: bob's tokens are refused by the live API at once
    (a History row says who did it); one issued afterwards works."""
    import httpx

    config, srv, _ = setup
    issued = (await cli("token", "issue", "-u", "bob", config=config)).stdout.strip()
    url, headers = f"{srv.url}/api/v1/me", {"Authorization": f"Bearer {issued}"}
    async with httpx.AsyncClient() as http:
        assert (await http.get(url, headers=headers)).status_code == 200
        r = await cli("token", "revoke", "-u", "bob", config=config)
        assert r.code == 0, r.stderr
        assert "bob" in r.stderr and r.stdout == ""
        gone = await http.get(url, headers=headers)
        assert gone.status_code == 401 and gone.json()["detail"] == "the token has been revoked"
        fresh = (await cli("token", "issue", "-u", "bob", config=config)).stdout.strip()
        r = await http.get(url, headers={"Authorization": f"Bearer {fresh}"})
        assert r.status_code == 200 and r.json()["name"] == "bob"
    row = await History.find({"op": "revoke_user_tokens"}).sort(-History.timestamp).first_or_none()
    assert row is not None and row.changes["user"] == "bob"
    before = await History.find({}).count()
    r = await cli("token", "revoke", "-u", "ghost", config=config)
    assert r.code == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and "ghost" in r.stderr
    assert "Traceback" not in r.stderr
    assert await History.find({}).count() == before


async def test_client_login_me_usage_quota_logout(cli, setup, api_env):  # type: ignore[no-untyped-def]
    config = setup[0]
    r = await cli("login", "-u", "alice", "--password-stdin", stdin=PASSWORDS["alice"] + "\n",
                  config=config)
    assert r.code == 0, r.stderr
    assert stat.S_IMODE(api_env.stat().st_mode) == 0o600
    assert stat.S_IMODE(api_env.parent.stat().st_mode) == 0o700
    token = api_env.read_text().strip()
    assert token not in r.stderr + r.stdout and PASSWORDS["alice"] not in r.stderr
    r = await cli("me", "--json", config=config)
    assert r.code == 0 and r.json()["name"] == "alice" and r.json()["role"] == "user"
    r = await cli("usage", "-s", "farm", "--json", config=config)
    assert r.code == 0, r.stderr
    assert r.json()["user"] == "alice" and r.json()["total"]["jobs"] == 0
    r = await cli("quota", "show", "-s", "farm", "--json", config=config)
    assert r.code == 0 and r.json()[0]["name"] == "alice"
    r = await cli("quota", "show", "-s", "farm", "-u", "bob", config=config)
    assert r.code == 2 and "alice may not quota:read" in r.stderr
    r = await cli("quota", "set", "-s", "farm", "-u", "alice", "--cpu", "10h", config=config)
    assert r.code == 2 and "may not quota:write" in r.stderr
    r = await cli("logout", config=config)
    assert r.code == 0 and not api_env.exists()
    r = await cli("me", config=config)
    assert r.code == 2 and "not signed in" in r.stderr
    # the server revoked the token, not just the client forgetting it
    import httpx

    async with httpx.AsyncClient() as http:
        gone = await http.get(f"{setup[1].url}/api/v1/me",
                              headers={"Authorization": f"Bearer {token}"})
    assert gone.status_code == 401 and gone.json()["detail"] == "the token has been revoked"
    # nothing secret in the server's log
    served = setup[1].log.read_text()
    assert "/api/v1/login" in served and "/api/v1/me" in served  # the access log is there
    assert token not in served and PASSWORDS["alice"] not in served


async def test_operator_sets_quotas_through_the_client(cli, setup, api_env):  # type: ignore[no-untyped-def]
    config = setup[0]
    r = await cli("login", "-u", "olga", "--password-stdin", stdin=PASSWORDS["olga"],
                  config=config)
    assert r.code == 0, r.stderr
    r = await cli("quota", "set", "-s", "farm", "-u", "bob", "--cpu", "10h", config=config)
    assert r.code == 0, r.stderr
    r = await cli("quota", "adjust", "-s", "farm", "-u", "bob", "--cpu", "-1h",
                  "--reason", "node failure", config=config)
    assert r.code == 0, r.stderr
    r = await cli("quota", "show", "-s", "farm", "-u", "bob", "--json", config=config)
    assert r.json()[0]["cpu_minutes"]["quota"] == 600
    # people's words: hours, preallocated, "unlimited" (never "None" or "(none)"); issue 28
    import re

    r = await cli("quota", "show", "-s", "farm", "-u", "bob", config=config)
    assert r.code == 0, r.stderr
    flat = " ".join(r.stderr.split())
    assert "(hours)" in flat and "prealloc" in flat and "10.0h" in flat
    assert "unlimited" in flat and "None" not in flat and "(none)" not in flat
    r = await cli("quota", "set", "-s", "farm", "-u", "bob", "--gpu", "unlimited",
                  config=config)
    assert r.code == 0 and "GPU unlimited" in r.stderr and "None" not in r.stderr
    r = await cli("me", config=config)
    assert r.code == 0 and re.search(r"token expires at\s+20\d\d-\d\d-\d\d", r.stderr), \
        r.stderr
    from cheeto_like.models import History

    row = await History.find({"op": "set_quota"}).sort(-History.timestamp).first_or_none()
    assert row is not None and row.author == "olga"


async def test_client_errors_are_one_line(cli, setup, api_env, monkeypatch):  # type: ignore[no-untyped-def]
    config = setup[0]
    r = await cli("login", "-u", "alice", config=config)
    assert r.code == 2 and "--password-stdin" in r.stderr  # no terminal, no argv password
    r = await cli("login", "-u", "alice", "--password-stdin", stdin="wrong\n", config=config)
    assert r.code == 2 and "invalid user name or password" in r.stderr
    assert "Traceback" not in r.stderr
    monkeypatch.delenv("CHEETO_API_URL")
    r = await cli("me", config=config)
    assert r.code == 2 and "CHEETO_API_URL" in r.stderr
    monkeypatch.setenv("CHEETO_API_URL", "http://127.0.0.1:9")
    r = await cli("login", "-u", "alice", "--password-stdin", stdin="x\n", config=config)
    assert r.code == 1 and "cannot reach the API" in r.stderr


async def test_client_block_of_the_config(cli, setup, api_env, monkeypatch, tmp_path):  # type: ignore[no-untyped-def]
    config, srv, _ = setup
    monkeypatch.delenv("CHEETO_API_URL")
    with_client = tmp_path / "client.yaml"
    with_client.write_text(config.read_text() + f"client:\n  url: {srv.url}\n")
    r = await cli("login", "-u", "alice", "--password-stdin", stdin=PASSWORDS["alice"],
                  config=with_client)
    assert r.code == 0, r.stderr
    r = await cli("me", "--json", config=with_client)
    assert r.code == 0 and r.json()["name"] == "alice"


async def test_admins_grant_revoke_and_list_roles_through_the_client(cli, setup, api_env):  # type: ignore[no-untyped-def]
    """``cheeto role …`` (issue 28 item 8): the API's /roles, from a login node."""
    config = setup[0]
    r = await cli("login", "-u", "adam", "--password-stdin", stdin=PASSWORDS["adam"],
                  config=config)
    assert r.code == 0, r.stderr
    r = await cli("role", "grant", "-u", "carl", "--role", "manager", "-A", "proj", "-A", "lab",
                  config=config)
    assert r.code == 0, r.stderr
    assert r.stdout == "" and "carl is manager of lab, proj" in r.stderr
    row = await History.find({"op": "grant_role"}).sort(-History.timestamp).first_or_none()
    assert row is not None and row.author == "adam" and row.changes["user"] == "carl"
    r = await cli("role", "list", "-u", "carl", "--json", config=config)
    assert r.code == 0, r.stderr
    assert [g for g in r.json() if g["via"] == "grant"] == [
        {"user": "carl", "role": "manager", "accounts": ["lab", "proj"], "via": "grant"}]
    r = await cli("role", "list", "--yaml", config=config)
    assert r.code == 0 and "role: admin" in r.stdout and "user: adam" in r.stdout
    r = await cli("role", "list", config=config)
    assert r.code == 0 and r.stdout == "" and "carl" in r.stderr and "roles (" in r.stderr
    r = await cli("role", "revoke", "-u", "carl", "--role", "manager", "-A", "lab",
                  config=config)
    assert r.code == 0 and "carl manages proj" in r.stderr, r.stderr
    r = await cli("role", "revoke", "-u", "carl", "--role", "manager", config=config)
    assert r.code == 0 and "carl is no longer manager" in r.stderr, r.stderr
    r = await cli("role", "list", "-u", "carl", "--json", config=config)
    assert [g for g in r.json() if g["via"] == "grant"] == []
    # bad input: one line, exit 2, nothing written
    before = await History.find({}).count()
    for argv, words in [
        (("role", "grant", "-u", "carl", "--role", "manager"), "--account"),
        (("role", "revoke", "-u", "carl", "--role", "manager"), "does not have the role"),
        (("role", "grant", "-u", "ghost", "--role", "operator"), "ghost"),
        (("role", "grant", "-u", "carl", "--role", "king"), "invalid choice"),
        (("role", "revoke", "-u", "bad name", "--role", "admin"), "user"),
    ]:
        r = await cli(*argv, config=config)
        assert r.code == 2 and words in r.stderr, (argv, r.stderr)
        assert r.stdout == "" and "Traceback" not in r.stderr
    assert await History.find({}).count() == before
    # a person who is not an admin: the API's 403 as one plain line
    r = await cli("login", "-u", "olga", "--password-stdin", stdin=PASSWORDS["olga"],
                  config=config)
    assert r.code == 0, r.stderr
    for argv in (("role", "list"), ("role", "grant", "-u", "carl", "--role", "operator"),
                 ("role", "revoke", "-u", "adam", "--role", "admin")):
        r = await cli(*argv, config=config)
        assert r.code == 2 and r.stdout == "", r.stderr
        assert r.stderr.strip().splitlines() == [r.stderr.strip()]
        assert "olga may not role:" in r.stderr and "Traceback" not in r.stderr
        assert "[" not in r.stderr  # plain, no markup
    assert await History.find({}).count() == before


def test_the_client_offers_the_roles_the_store_grants():
    from cheeto_like.cli.client_role import ROLES
    from cheeto_like.models.auth import GRANTED_ROLES

    assert ROLES == GRANTED_ROLES

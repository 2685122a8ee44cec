"""``/api/v1`` in process: sign-in against the store's yescrypt hashes, the limiter,
logout and revocation, /me, pagination and filters, problem details for bad input,
the API key lifecycle (create, use, rotate with overlap, revoke), batched last use,
the static key's deprecation, and no secret in the log or History."""

from __future__ import annotations

import logging
import time

import pytest

from cheeto_like.auth.apikeys import fingerprint
from cheeto_like.config import Config
from cheeto_like.models import ApiKey, History, RevokedToken
from cheeto_like.web.app import create_api
from tests.web.conftest import PASSWORDS, STATIC_KEY, api_config, bearer

PROBLEM = "application/problem+json"


class LogText(logging.Handler):
    """Everything logged while a test runs, as text. Attached to ``cheeto_like`` itself
    (and the root), because an in-process CLI run turns the package logger's
    propagation off, which would leave ``caplog`` empty and its checks vacuous."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.name} {record.getMessage()}")

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@pytest.fixture
def api_log():  # type: ignore[no-untyped-def]
    handler = LogText()
    ours, root = logging.getLogger("cheeto_like"), logging.getLogger()
    levels = ours.level, root.level
    for logger in (ours, root):
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        for logger, level in zip((ours, root), levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)


async def login(http, user: str, password: str, ip: str | None = None):  # type: ignore[no-untyped-def]
    return await http.post("/api/v1/login", json={"username": user, "password": password})


async def test_login_with_the_stored_hash(http, app, api_log):  # type: ignore[no-untyped-def]
    r = await login(http, "alice", PASSWORDS["alice"])
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["user"] == "alice" and body["token_type"] == "bearer"
    assert body["expires_at"] > time.time() + 7 * 3600
    me = await http.get("/api/v1/me", headers={"Authorization": f"Bearer {body['access_token']}"})
    assert me.status_code == 200
    assert me.json()["name"] == "alice" and me.json()["role"] == "user"
    assert me.json()["member_of"] == ["lab"]
    assert "signed in: alice" in api_log.text  # the log is captured, and holds no secret
    assert body["access_token"] not in api_log.text and PASSWORDS["alice"] not in api_log.text


@pytest.mark.parametrize(("user", "password"), [
    ("alice", "wrong"), ("nobody", "whatever"), ("bob", "no-password-set"),
    ("ALICE!", "x"), ("alice", "")])
async def test_bad_logins_are_one_kind_of_401(http, user, password):  # type: ignore[no-untyped-def]
    r = await login(http, user, password)
    if password == "":
        assert r.status_code == 422  # schema: min length
    else:
        assert r.status_code == 401, r.text
        assert r.json()["detail"] == "invalid user name or password"
    assert r.headers["content-type"] == PROBLEM


async def test_failed_logins_are_limited(world, tmp_path):  # type: ignore[no-untyped-def]
    """One name from one address is refused after login_max_failures, even with the right
    password; a colleague behind the same address is not, until the address's own
    ceiling (a spray of names) is reached."""
    import httpx

    app = create_api(api_config(tmp_path, login_max_failures=3,
                                login_address_max_failures=5), store=world)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://api") as http:
        for _ in range(3):
            assert (await login(http, "olga", "wrong")).status_code == 401
        r = await login(http, "olga", PASSWORDS["olga"])  # even the right password
        assert r.status_code == 429
        assert int(r.headers["retry-after"]) > 0
        assert r.headers["content-type"] == PROBLEM
        # the same address, another name with no failures of its own: not limited
        assert (await login(http, "adam", PASSWORDS["adam"])).status_code == 200
        for name in ("junk1", "junk2"):  # the address reaches its ceiling (5)
            assert (await login(http, name, "x")).status_code == 401
        assert (await login(http, "adam", PASSWORDS["adam"])).status_code == 429


async def test_failed_logins_are_limited_per_user_across_addresses(world, tmp_path, api_log):  # type: ignore[no-untyped-def]
    """Guessing one person's password from many addresses is limited by the name's
    count at every address that guessed; the person at a fresh address still signs in
    (nobody can lock them out), and a password typed as the user name never reaches
    the log."""
    import httpx

    app = create_api(api_config(tmp_path, login_max_failures=3, login_user_max_failures=3),
                     store=world)

    def client(address: str) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=app, client=(address, 4242))
        return httpx.AsyncClient(transport=transport, base_url="http://api")

    for n in range(3):
        async with client(f"10.0.0.{n + 1}") as http:
            assert (await login(http, "olga", "wrong")).status_code == 401
    async with client("10.0.0.2") as http:  # one failure here, three for the name
        r = await login(http, "olga", PASSWORDS["olga"])
        assert r.status_code == 429 and int(r.headers["retry-after"]) > 0
    async with client("10.0.0.9") as http:  # olga's own machine: no failures here
        assert (await login(http, "olga", PASSWORDS["olga"])).status_code == 200
        assert (await login(http, "adam", PASSWORDS["adam"])).status_code == 200
        assert (await login(http, "Tr0ub4dor&3 pw", "x")).status_code == 401
    assert "Tr0ub4dor" not in api_log.text and "(not a user name)" in api_log.text


async def test_logout_revokes_the_token(http, app):  # type: ignore[no-untyped-def]
    r = await login(http, "adam", PASSWORDS["adam"])
    headers = {"Authorization": f"Bearer {r.json()['access_token']}"}
    before = await History.find({}).count()
    assert (await http.post("/api/v1/logout", headers=headers)).status_code == 204
    r = await http.get("/api/v1/me", headers=headers)
    assert r.status_code == 401 and r.json()["detail"] == "the token has been revoked"
    assert await RevokedToken.find({}).count() >= 1
    assert await History.find({}).count() == before  # no History row per sign-out


async def test_people_no_longer_active_are_signed_out_at_once(app, world):  # type: ignore[no-untyped-def]
    """A disabled person's token stops working on the next request, and they cannot
    sign in again (with the same answer as a wrong password)."""
    import httpx

    from cheeto_like.operations.user import SetUserPassword, SetUserStatus
    from tests.factories import AUTHOR

    await SetUserPassword.run(world, AUTHOR, name="dave", password="dave-pw")
    # an address of its own: the refused sign-in must not count against the others
    transport = httpx.ASGITransport(app=app, client=("10.1.1.1", 4242))
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
        r = await login(http, "dave", "dave-pw")
        assert r.status_code == 200
        headers = {"Authorization": f"Bearer {r.json()['access_token']}"}
        assert (await http.get("/api/v1/me", headers=headers)).status_code == 200
        await SetUserStatus.run(world, AUTHOR, name="dave", status="disabled", reason="left")
        r = await http.get("/api/v1/me", headers=headers)
        assert r.status_code == 401 and r.json()["detail"] == "this account may not sign in"
        r = await login(http, "dave", "dave-pw")
        assert r.status_code == 401 and r.json()["detail"] == "invalid user name or password"
        await SetUserStatus.run(world, AUTHOR, name="dave", status="active", reason="back")
        assert (await http.get("/api/v1/me", headers=headers)).status_code == 200


async def test_people_past_their_expiry_are_signed_out_at_once(app, world):  # type: ignore[no-untyped-def]
    """An expiry takes access away with no write: a token stops at the next request after
    ``expires_at`` passes, and signing in is refused like a wrong password."""
    from datetime import UTC, datetime, timedelta

    import httpx

    from cheeto_like.models import User
    from cheeto_like.operations.user import SetUserPassword

    await SetUserPassword.run(world, "test", name="carl", password="carl-pw")
    transport = httpx.ASGITransport(app=app, client=("10.1.1.2", 4242))
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
        r = await login(http, "carl", "carl-pw")
        assert r.status_code == 200
        headers = {"Authorization": f"Bearer {r.json()['access_token']}"}
        assert (await http.get("/api/v1/me", headers=headers)).status_code == 200
        carl = await User.find_one({"name": "carl"})
        assert carl is not None
        carl.expires_at = datetime.now(UTC) - timedelta(seconds=1)
        await carl.save()
        r = await http.get("/api/v1/me", headers=headers)
        assert r.status_code == 401 and r.json()["detail"] == "this account may not sign in"
        r = await login(http, "carl", "carl-pw")
        assert r.status_code == 401 and r.json()["detail"] == "invalid user name or password"
        carl.expires_at = None
        await carl.save()
        assert (await http.get("/api/v1/me", headers=headers)).status_code == 200


async def test_expired_revocations_are_cleared(http, app, world):  # type: ignore[no-untyped-def]
    await RevokedToken(jti="old-token-id-123", exp_epoch=int(time.time()) - 10).insert()
    r = await login(http, "adam", PASSWORDS["adam"])
    headers = {"Authorization": f"Bearer {r.json()['access_token']}"}
    assert (await http.post("/api/v1/logout", headers=headers)).status_code == 204
    assert await RevokedToken.find_one({"jti": "old-token-id-123"}) is None


async def test_bad_credentials_are_401_problems(http):  # type: ignore[no-untyped-def]
    for headers in ({"Authorization": "Bearer not.a.token"}, {"Authorization": "Basic eDp5"},
                    {"X-API-Key": "ck_" + "x" * 43}, {"X-API-Key": "short"}):
        r = await http.get("/api/v1/me", headers=headers)
        assert r.status_code == 401, (headers, r.text)
        assert r.headers["content-type"] == PROBLEM
        assert r.headers["www-authenticate"] == "Bearer"


async def test_pagination_and_filters(http, app):  # type: ignore[no-untyped-def]
    h = await bearer(app, "olga")
    everyone = (await http.get("/api/v1/users", headers=h)).json()
    assert everyone["total"] == 8 and everyone["limit"] == 100 and everyone["offset"] == 0
    names = [u["name"] for u in everyone["items"]]
    assert names == sorted(names)
    assert all("password" not in u for u in everyone["items"])
    page = (await http.get("/api/v1/users?limit=3&offset=2", headers=h)).json()
    assert [u["name"] for u in page["items"]] == names[2:5] and page["total"] == 8
    lab = (await http.get("/api/v1/users?group=lab", headers=h)).json()
    assert [u["name"] for u in lab["items"]] == ["alice"]
    # a user sees only their groups in the list
    mine = (await http.get("/api/v1/groups", headers=await bearer(app, "alice"))).json()
    assert [g["name"] for g in mine["items"]] == ["lab"]
    sam = (await http.get("/api/v1/groups", headers=await bearer(app, "sam"))).json()
    assert [g["name"] for g in sam["items"]] == ["proj"]  # a sponsor manages their group


@pytest.mark.parametrize(("path", "status"), [
    ("/api/v1/users?limit=0", 422), ("/api/v1/users?limit=abc", 422),
    ("/api/v1/users?offset=-1", 422), ("/api/v1/users?group=nosuch", 404),
    ("/api/v1/users/no_such_user", 404), ("/api/v1/users/bad%20name", 422),
    ("/api/v1/sites/nowhere", 404), ("/api/v1/usage/farm?user=alice&account=lab", 422),
    ("/api/v1/usage/farm?start=2026-01-01T00:00:00Z", 422), ("/api/v1/nothing", 404),
    ("/api/v1/usage/farm?start=2026-02-01T00:00:00Z&end=2026-01-01T00:00:00Z", 422)])
async def test_bad_input_is_a_4xx_problem(http, app, path, status):  # type: ignore[no-untyped-def]
    r = await http.get(path, headers=await bearer(app, "adam"))
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == PROBLEM
    body = r.json()
    assert body["status"] == status and body["title"] and body["detail"]


async def test_bad_bodies_are_422_problems(http, app):  # type: ignore[no-untyped-def]
    h = await bearer(app, "olga")
    for body in ({"cpu_minutes": -5}, {"cpu_minutes": "lots"}, {"period": "weekly"},
                 {"period": "explicit"}, [1, 2]):
        r = await http.put("/api/v1/quotas/farm/users/alice", headers=h, json=body)
        assert r.status_code == 422, (body, r.text)
        assert r.headers["content-type"] == PROBLEM
    r = await http.post("/api/v1/adjustments/farm", headers=h,
                        json={"user": "alice", "reason": "nothing"})
    assert r.status_code == 422 and "non-zero" in r.json()["detail"]
    r = await http.put("/api/v1/quotas/farm/users/nobody", headers=h, json={"cpu_minutes": 1})
    assert r.status_code == 404


async def test_quota_round_trip_through_the_api(http, app):  # type: ignore[no-untyped-def]
    h = await bearer(app, "olga")
    r = await http.put("/api/v1/quotas/farm/users/bob", headers=h,
                       json={"cpu_minutes": 600, "gpu_minutes": None})
    assert r.status_code == 200 and r.json()["cpu_minutes"] == 600
    r = await http.put("/api/v1/quotas/farm/users/bob", headers=h, json={"gpu_minutes": 30})
    assert r.json()["cpu_minutes"] == 600 and r.json()["gpu_minutes"] == 30  # kept
    r = await http.post("/api/v1/adjustments/farm", headers=h,
                        json={"user": "bob", "cpu_minutes": 90, "reason": "rerun"})
    assert r.status_code == 201
    status = (await http.get("/api/v1/quotas/farm?user=bob",
                             headers=await bearer(app, "sam"))).json()
    row = status["items"][0]
    assert (row["kind"], row["name"], row["source"]) == ("user", "bob", "own")
    assert row["cpu_minutes"]["used"] == 90 and row["cpu_minutes"]["quota"] == 600
    assert (await http.get("/api/v1/quotas/farm?user=bob",
                           headers=await bearer(app, "alice"))).status_code == 403


async def test_a_budget_round_trip_through_the_api(http, app):  # type: ignore[no-untyped-def]
    """Issue 28: a budget (money in the site's currency), the defaults' budgets and a
    money adjustment; the status carries money used against the budget."""
    h = await bearer(app, "olga")
    r = await http.put("/api/v1/quotas/farm/users/bob", headers=h, json={"budget": 50})
    assert r.status_code == 200 and r.json()["budget"] == 50
    r = await http.put("/api/v1/quotas/farm/users/bob", headers=h, json={"cpu_minutes": 10})
    assert r.json()["budget"] == 50  # kept
    r = await http.post("/api/v1/adjustments/farm", headers=h,
                        json={"user": "bob", "money": 12.5, "reason": "storage"})
    assert r.status_code == 201 and r.json()["money"] == 12.5
    r = await http.put("/api/v1/defaults/farm", headers=h, json={"account_budget": 200})
    assert r.status_code == 200 and r.json()["account_budget"] == 200
    status = (await http.get("/api/v1/quotas/farm?user=bob", headers=h)).json()
    budget = status["items"][0]["budget"]
    assert (budget["used"], budget["quota"], budget["percent"]) == (12.5, 50, 25.0)
    r = await http.put("/api/v1/quotas/farm/users/bob", headers=h, json={"budget": -1})
    assert r.status_code == 422


async def test_api_key_lifecycle(http, app, world, api_log):  # type: ignore[no-untyped-def]
    admin = await bearer(app, "adam")
    r = await http.post("/api/v1/api-keys", headers=admin,
                        json={"name": "monitor", "scopes": ["api:read"],
                              "expires_in_days": 90})
    assert r.status_code == 201, r.text
    first = r.json()["secret"]
    assert first.startswith("ck_") and r.json()["prefix"] == first[:11]
    stored = await ApiKey.find_one({"name": "monitor"})
    assert stored is not None and stored.fingerprint == fingerprint(first)
    assert first not in stored.model_dump_json()
    rows = await History.find({"op": "create_api_key"}).to_list()
    assert rows[-1].author == "adam" and first not in str(rows[-1].changes)
    assert stored.fingerprint not in str(rows[-1].changes)

    key = {"X-API-Key": first}
    assert (await http.get("/api/v1/users", headers=key)).status_code == 200
    assert (await http.get("/api/v1/roles", headers=key)).status_code == 403
    assert (await http.get("/api/v1/users", headers={"Authorization": f"Bearer {first}"})
            ).status_code == 200

    # last use: remembered in memory, written by the batch flush
    assert (await ApiKey.find_one({"name": "monitor"})).last_used_epoch is None
    assert await app.state.auth.recorder.flush() >= 1
    assert (await ApiKey.find_one({"name": "monitor"})).last_used_epoch >= time.time() - 60

    r = await http.post("/api/v1/api-keys/monitor/rotate", headers=admin,
                        json={"overlap_hours": 1})
    second = r.json()["secret"]
    assert second != first and r.json()["previous_prefix"] == first[:11]
    assert (await http.get("/api/v1/users", headers={"X-API-Key": first})).status_code == 200
    assert (await http.get("/api/v1/users", headers={"X-API-Key": second})).status_code == 200

    r = await http.post("/api/v1/api-keys/monitor/rotate", headers=admin,
                        json={"overlap_hours": 0})
    third = r.json()["secret"]
    assert (await http.get("/api/v1/users", headers={"X-API-Key": second})).status_code == 401
    assert (await http.get("/api/v1/users", headers={"X-API-Key": first})).status_code == 401

    listed = (await http.get("/api/v1/api-keys", headers=admin)).json()["items"]
    mine = next(k for k in listed if k["name"] == "monitor")
    assert mine["state"] == "active" and "fingerprint" not in mine and "secret" not in mine

    assert (await http.delete("/api/v1/api-keys/monitor", headers=admin)).status_code == 204
    assert (await http.get("/api/v1/users", headers={"X-API-Key": third})).status_code == 401
    assert (await http.delete("/api/v1/api-keys/monitor", headers=admin)).status_code == 409
    for secret in (first, second, third):
        assert secret not in api_log.text
    ops = [h.op for h in await History.find({"changes.name": "monitor"}).to_list()]
    assert ops == ["create_api_key", "rotate_api_key", "rotate_api_key", "revoke_api_key"]


async def test_expired_keys_stop_working(http, app, world):  # type: ignore[no-untyped-def]
    from cheeto_like.operations.auth import CreateApiKey

    made = await CreateApiKey.run(world, "adam", name="short-lived", scopes=["api:read"],
                                  expires_in_days=1)
    key = await ApiKey.find_one({"name": "short-lived"})
    key.expires_epoch = int(time.time()) - 1
    await key.save()
    assert (await http.get("/api/v1/users", headers={"X-API-Key": made.secret})
            ).status_code == 401
    audit = (await http.get("/api/v1/api-keys/audit", headers=await bearer(app, "adam"))).json()
    assert {"name": "short-lived", "problem": "expired"}.items() <= next(
        f for f in audit["items"] if f["name"] == "short-lived").items()


async def test_puppet_routes_take_managed_keys_and_the_old_static_key(http, world, api_log):  # type: ignore[no-untyped-def]
    from cheeto_like.operations.auth import CreateApiKey

    made = await CreateApiKey.run(world, "adam", name="puppet", scopes=["puppet:read"])
    r = await http.get("/puppet/storage/farm", headers={"X-API-Key": made.secret})
    assert r.status_code == 200
    r = await http.get("/puppet/storage/farm", headers={"X-API-Key": STATIC_KEY})
    assert r.status_code == 200
    assert "api.api_key is deprecated" in api_log.text and STATIC_KEY not in api_log.text
    r = await http.get("/puppet/storage/farm", headers={"X-API-Key": STATIC_KEY + "x"})
    assert r.status_code == 401 and r.json() == {"detail": "invalid or missing API key"}


async def test_roles_through_the_api(http, app):  # type: ignore[no-untyped-def]
    admin = await bearer(app, "adam")
    r = await http.post("/api/v1/roles", headers=admin,
                        json={"user": "bob", "role": "manager", "accounts": ["lab"]})
    assert r.status_code == 201
    me = (await http.get("/api/v1/me", headers=await bearer(app, "bob"))).json()
    assert me["role"] == "manager" and me["managed_accounts"] == ["lab"]
    bob = await bearer(app, "bob")
    assert (await http.get("/api/v1/users/alice", headers=bob)).status_code == 200
    again = await http.post("/api/v1/roles", headers=admin,
                            json={"user": "bob", "role": "manager", "accounts": ["lab"]})
    assert again.status_code == 409
    listed = (await http.get("/api/v1/roles?user=sam", headers=admin)).json()["items"]
    assert listed == [{"user": "sam", "role": "manager", "accounts": ["proj"],
                       "via": "sponsor"}]
    r = await http.delete("/api/v1/roles/bob/manager?account=lab", headers=admin)
    assert r.status_code == 204
    # the grant is gone at once, for a token issued before
    assert (await http.get("/api/v1/users/alice", headers=bob)).status_code == 403
    history = await History.find({"op": "revoke_role"}).to_list()
    assert history[-1].author == "adam"


async def test_why_and_associations(http, app):  # type: ignore[no-untyped-def]
    r = await http.get("/api/v1/why/farm/alice", headers=await bearer(app, "alice"))
    assert r.status_code == 200, r.text
    assert r.json()["user"] == "alice" and "can_submit" in r.json()
    r = await http.get("/api/v1/users/alice/slurm/farm", headers=await bearer(app, "alice"))
    assert r.status_code == 200 and r.json()["site"] == "farm"


async def test_secure_headers(http, app):  # type: ignore[no-untyped-def]
    r = await http.get("/api/v1/me", headers=await bearer(app, "alice"))
    for name in ("x-content-type-options", "x-frame-options", "referrer-policy",
                 "content-security-policy", "cache-control"):
        assert name in r.headers, name


async def test_https_responses_ask_browsers_to_keep_to_tls(app):  # type: ignore[no-untyped-def]
    import httpx

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="https://api") as tls:
        r = await tls.get("/api/v1/me", headers=await bearer(app, "alice"))
    assert r.headers["strict-transport-security"] == "max-age=31536000"
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://api") as plain:
        r = await plain.get("/api/v1/me", headers=await bearer(app, "alice"))
    assert "strict-transport-security" not in r.headers  # only meaningful over TLS


def test_config_without_api_block_still_builds(world, tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    from cheeto_like.config import MongoConfig

    app = create_api(Config(mongo=MongoConfig()), store=world)
    assert (tmp_path / "cheeto" / "jwt.key").stat().st_mode & 0o777 == 0o600
    assert app.state.auth.issuer.audience == "cheeto-api"


async def test_managed_keys_only_closes_the_puppet_routes(world, tmp_path):  # type: ignore[no-untyped-def]
    import httpx

    from cheeto_like.operations.auth import CreateApiKey
    from cheeto_like.web.app import check_bind

    config = api_config(tmp_path, api_key=None, managed_keys_only=True)
    check_bind(config.api, "0.0.0.0", insecure=False)  # nothing is open: no refusal
    made = await CreateApiKey.run(world, "adam", name="puppet-managed", scopes=["puppet:read"])
    app = create_api(config, store=world)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://api") as http:
        assert (await http.get("/puppet/storage/farm")).status_code == 401
        r = await http.get("/puppet/storage/farm", headers={"X-API-Key": made.secret})
        assert r.status_code == 200
        r = await http.get("/puppet/storage/farm", headers=await bearer(app, "alice"))
        assert r.status_code == 403
    await app.state.cache.close()  # no lifespan in process: stop its background tasks

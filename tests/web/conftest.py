"""A small world for the API tests: site ``farm``, groups ``lab`` and ``proj``, and one
person per role.

- alice: a plain user, member of lab (password ``alice-pw``);
- bob: member of proj;
- mona: manager of lab (explicit grant);
- sam: sponsor of proj (manager implicitly);
- olga: operator; adam: admin; carl and dave: targets for role changes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from cheeto_like.auth.principal import subject_of
from cheeto_like.config import ApiConfig, Config, MongoConfig
from cheeto_like.operations.group_membership import AddGroupMember, AddGroupSponsor
from cheeto_like.operations.user import SetUserPassword
from cheeto_like.store import Store
from cheeto_like.web.app import create_api
from tests.factories import AUTHOR, make_group, make_site, make_user

STATIC_KEY = "static-puppet-key-0123456789-abcdefghijkl"
PASSWORDS = {"alice": "alice-pw", "adam": "adam-pw", "olga": "olga-pw"}


async def seed_world(store: Store) -> None:
    from cheeto_like.operations.auth import GrantRole
    from tests.conftest import seed_access_status, wipe

    await wipe()
    await seed_access_status()
    await make_site(store, "farm")
    for name in ("alice", "bob", "mona", "sam", "olga", "adam", "carl", "dave"):
        await make_user(store, name, site="farm")
    for name, password in PASSWORDS.items():
        await SetUserPassword.run(store, AUTHOR, name=name, password=password)
    await make_group(store, "lab")
    await make_group(store, "proj")
    await AddGroupMember.run(store, AUTHOR, group="lab", user="alice", site="farm")
    await AddGroupMember.run(store, AUTHOR, group="proj", user="bob", site="farm")
    await AddGroupSponsor.run(store, AUTHOR, group="proj", user="sam", site="farm")
    await GrantRole.run(store, AUTHOR, user="mona", role="manager", accounts=["lab"])
    await GrantRole.run(store, AUTHOR, user="olga", role="operator")
    await GrantRole.run(store, AUTHOR, user="adam", role="admin")
    await GrantRole.run(store, AUTHOR, user="dave", role="operator")


def api_config(tmp: Path, **api: object) -> Config:
    fields: dict[str, object] = {"api_key": STATIC_KEY, "jwt_key_file": tmp / "jwt.key"}
    fields.update(api)
    return Config(mongo=MongoConfig(), api=ApiConfig(**fields))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
async def world(store: Store) -> Store:
    await seed_world(store)
    return store


@pytest.fixture(autouse=True)
async def fresh_signin_counts(store: Store) -> None:
    """Failed sign-ins are counted in the store (shared by every app on it, as by every
    API process), so each test starts without another test's failures."""
    from cheeto_like.auth.ratelimit import COLLECTION

    await store.database[COLLECTION].delete_many({})


@pytest.fixture(scope="module")
def app_config(tmp_path_factory: pytest.TempPathFactory) -> Config:
    return api_config(tmp_path_factory.mktemp("api"))


@pytest.fixture(scope="module")
async def app(world: Store, app_config: Config):  # type: ignore[no-untyped-def]
    """The API app (in process: ``httpx.ASGITransport`` runs no lifespan, so the export
    cache's background tasks are stopped here, or they would outlive the module and
    poll a store another module has moved on from)."""
    built = create_api(app_config, store=world)
    try:
        yield built
    finally:
        await built.state.cache.close()


@pytest.fixture
async def http(app) -> AsyncIterator[httpx.AsyncClient]:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://api") as client:
        yield client


async def bearer(app, user: str, **kwargs: object) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Headers signing ``user`` in with a fresh token (naming their id and current token
    version, as a sign-in would)."""
    token, _ = app.state.auth.issuer.issue(await subject_of(user), **kwargs)
    return {"Authorization": f"Bearer {token}"}

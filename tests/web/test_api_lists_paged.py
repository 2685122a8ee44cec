"""``/api/v1/users`` and ``/api/v1/groups`` read one page from the store (issue 31).

Every page of every filter is the same slice of the full listing the routes answered
before they paged (``find_users``/``list_groups``, the whole site sorted by name, then
``page(items, limit, offset)``), with the same ``total``, including offsets at the last
item, at the end and past it; and the number of store commands a page costs does not
change when the site grows.

The population is a few hundred users written straight into the store (the operations
are not what is tested here; the name registry is skipped, as ``seed_access_status``
documents), beside the API tests' world (tests/web/conftest.py) for its principals.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from pydantic import TypeAdapter

from cheeto_like.auth import rules
from cheeto_like.auth.principal import load_person, subject_of
from cheeto_like.models import Group, GroupMembership, User, UserSiteInfo
from cheeto_like.operations.site import AddStickyGroup
from cheeto_like.queries.group import list_groups
from cheeto_like.queries.user import find_users
from cheeto_like.store import Store
from cheeto_like.web.api_v1 import user_view

from ..factories import AUTHOR, make_group, make_site
from ..queries.test_query_count import CommandCounter, listening
from .conftest import bearer, seed_world

USERS = 240
GROUPS = 24
FAR = 10_000_000  # the largest offset the routes take
JSON = TypeAdapter(list[dict[str, Any]])


async def add_population(start: int, count: int) -> None:
    """Users ``u<start>`` … on farm (four in five) and hive (one in three), with global
    and per-site statuses, access lists, types and expiries that vary, and one plain
    group each at farm (the users off farm too: an edge is not a site record)."""
    users, records, edges = [], [], []
    for i in range(start, start + count):
        name = f"u{i:04d}"
        users.append(User(
            name=name, email=f"{name}@example.org", uid=2_000_000 + i, gid=2_000_000 + i,
            fullname=f"Paged {name}", home_directory=f"/home/{name}",
            status="inactive" if i % 7 == 0 else "active",
            type="admin" if i % 13 == 0 else "user",
            access=["login-ssh", "slurm"] if i % 4 == 0 else ["login-ssh"],
            expires_at=datetime(2031, 1, 1 + i % 28, tzinfo=UTC) if i % 17 == 0 else None))
        if i % 5:
            records.append(UserSiteInfo(user=name, site="farm",
                                        status="inactive" if i % 11 == 0 else None))
        if i % 3 == 0:
            records.append(UserSiteInfo(user=name, site="hive"))
        edges.append(GroupMembership(user=name, group=f"grp{i % GROUPS:02d}", site="farm",
                                     roles=["member"] if i % 9 else ["sponsor"]))
    for model, docs in ((User, users), (UserSiteInfo, records), (GroupMembership, edges)):
        await model.get_pymongo_collection().insert_many(
            [d.model_dump(by_alias=True) for d in docs])


@pytest.fixture(scope="module")
async def world(store: Store) -> Store:
    """The API tests' world, a second site, groups grp00… and ``everyone`` (sticky at
    farm), and ``USERS`` more users."""
    await seed_world(store)
    await make_site(store, "hive")
    await Group.get_pymongo_collection().insert_many([
        Group(name=f"grp{g:02d}", gid=3_000_000 + g).model_dump(by_alias=True)
        for g in range(GROUPS)])
    await make_group(store, "everyone")
    await AddStickyGroup.run(store, AUTHOR, site="farm", group="everyone")
    await add_population(0, USERS)
    return store


def offsets(total: int, limit: int) -> list[int]:
    """Every page's start, then the edges: the last item, the end, past it, the cap."""
    return [*range(0, total, limit), max(total - 1, 0), total, total + 1, FAR]


async def walk(http: httpx.AsyncClient, path: str, headers: dict[str, str],
               params: dict[str, str], expected: list[dict[str, Any]]) -> None:
    """Every page of ``path`` is ``expected``'s slice, with its total."""
    wanted = JSON.dump_python(expected, mode="json")
    for limit in (100, 37, 1000):
        for offset in offsets(len(wanted), limit):
            r = await http.get(path, headers=headers,
                               params={**params, "limit": limit, "offset": offset})
            assert r.status_code == 200, r.text
            body = r.json()
            where = f"{path} {params} limit={limit} offset={offset}"
            assert body["items"] == wanted[offset:offset + limit], where
            assert (body["total"], body["limit"], body["offset"]) == (
                len(wanted), limit, offset), where


USER_FILTERS: list[dict[str, str]] = [
    {}, {"site": "farm"}, {"site": "hive"}, {"site": "farm", "group": "grp03"},
    {"site": "farm", "group": "everyone"}, {"site": "hive", "group": "everyone"},
    {"status": "inactive"}, {"group": "grp05"}, {"group": "everyone"},
    {"status": "active", "group": "grp07"}, {"site": "farm", "status": "inactive"},
    {"site": "farm", "group": "grp04", "status": "active"},
]


@pytest.mark.parametrize("filters", USER_FILTERS, ids=lambda f: "&".join(
    f"{k}={v}" for k, v in f.items()) or "all")
async def test_every_users_page_is_a_slice_of_the_full_listing(app, http, world, filters):  # type: ignore[no-untyped-def]
    everyone = [user_view(u) for u in await find_users(**filters)]  # type: ignore[arg-type]
    assert len(everyone) > 3 or filters.get("site") == "hive"
    await walk(http, "/api/v1/users", await bearer(app, "adam"), filters, everyone)


GROUP_FILTERS: list[dict[str, str]] = [
    {}, {"site": "farm"}, {"site": "hive"}, {"member": "u0003"},
    {"site": "farm", "member": "u0003"}, {"type": "group"}, {"type": "access"},
    {"site": "farm", "type": "group", "member": "alice"},
]


@pytest.mark.parametrize("who", ["adam", "mona", "alice", "sam"])
@pytest.mark.parametrize("filters", GROUP_FILTERS, ids=lambda f: "&".join(
    f"{k}={v}" for k, v in f.items()) or "all")
async def test_every_groups_page_is_a_slice_of_the_full_listing(app, http, world, who,  # type: ignore[no-untyped-def]
                                                                filters):
    """Each principal sees the groups the rule lets them (all, or the accounts they
    manage and belong to), filtered in the store and paged as before."""
    person = await subject_of(who)
    visible = rules.visible_accounts(await load_person(person.id, person.version))
    every = [{"name": g.name, "gid": g.gid, "type": g.type}
             for g in await list_groups(**filters)  # type: ignore[arg-type]
             if visible is None or g.name in visible]
    await walk(http, "/api/v1/groups", await bearer(app, who), filters, every)


async def test_unknown_names_are_still_404s_and_lists_still_refuse_users(app, http, world):  # type: ignore[no-untyped-def]
    admin = await bearer(app, "adam")
    for path, params in (("/api/v1/users", {"site": "nope"}),
                         ("/api/v1/users", {"group": "ghost"}),
                         ("/api/v1/users", {"site": "farm", "group": "ghost"}),
                         ("/api/v1/groups", {"site": "nope"}),
                         ("/api/v1/groups", {"member": "ghost"})):
        r = await http.get(path, headers=admin, params=params)
        assert r.status_code == 404, (path, params, r.text)
    r = await http.get("/api/v1/users", headers=await bearer(app, "alice"))
    assert r.status_code == 403


PAGES = [("/api/v1/users", {}), ("/api/v1/users", {"offset": "150"}),
         ("/api/v1/users", {"site": "farm"}), ("/api/v1/users", {"site": "farm",
                                                                 "offset": "120"}),
         ("/api/v1/users", {"site": "farm", "group": "grp02"}),
         ("/api/v1/users", {"site": "farm", "group": "everyone"}),
         ("/api/v1/users", {"status": "active", "group": "grp06"}),
         ("/api/v1/users", {"offset": str(FAR)}),
         ("/api/v1/groups", {}), ("/api/v1/groups", {"site": "farm"}),
         ("/api/v1/groups", {"member": "u0002"})]


async def commands_per_page(app, http, store: Store, mongo_config) -> list[int]:  # type: ignore[no-untyped-def]
    """The read commands (find, aggregate, count, distinct, getMore) each of ``PAGES``
    costs, its sign-in included, after one uncounted request."""
    headers = await bearer(app, "adam")
    found = []
    for path, params in PAGES:
        (await http.get(path, headers=headers, params={**params, "limit": 50})
         ).raise_for_status()
        async with listening(store, mongo_config, CommandCounter()) as counter:
            r = await http.get(path, headers=headers, params={**params, "limit": 50})
            assert r.status_code == 200, r.text
        found.append(len(counter.names))
    return found


async def test_a_page_costs_the_same_commands_as_the_site_grows(app, http, world,  # type: ignore[no-untyped-def]
                                                                mongo_config):
    """Three times the users, the same store commands per page (the joins are batched,
    nothing is read per row); the page of a site-effective status filter is outside
    this promise (``page_user_rows``) and not among ``PAGES``."""
    before = await commands_per_page(app, http, world, mongo_config)
    await add_population(USERS, 2 * USERS)
    try:
        after = await commands_per_page(app, http, world, mongo_config)
    finally:
        for model, field in ((User, "name"), (UserSiteInfo, "user"),
                             (GroupMembership, "user")):
            await model.get_pymongo_collection().delete_many(
                {field: {"$gte": f"u{USERS:04d}", "$lt": "v"}})
    assert after == before
    assert max(before) <= 12, dict(zip([f"{p} {q}" for p, q in PAGES], before, strict=True))


async def test_a_name_range_with_in_reads_only_the_named(world):  # type: ignore[no-untyped-def]
    """The shape the pages' joins use (``queries.group.name_in``): ``$gte``/``$lte``
    with ``$in`` on one indexed field, as MongoDB answers it."""
    users = User.get_pymongo_collection()
    names = ["u0010", "u0012", "u0150", "zz-nobody"]
    found = await users.find({"name": {"$gte": "u0010", "$lte": "zz-nobody", "$in": names}},
                             {"_id": 0, "name": 1}).to_list()
    assert sorted(r["name"] for r in found) == ["u0010", "u0012", "u0150"]
    found = await users.find({"name": {"$gte": "u0013", "$lte": "u0149", "$in": names}},
                             {"_id": 0, "name": 1}).to_list()
    assert [r["name"] for r in found] == []
    records = UserSiteInfo.get_pymongo_collection()
    found = await records.find({"site": "farm", "user": {
        "$gte": "u0010", "$lte": "u0015", "$in": ["u0010", "u0011", "u0015"]}},
        {"_id": 0, "user": 1}).to_list()
    assert [r["user"] for r in found] == ["u0011"]  # u0010, u0015: off farm (i % 5 == 0)


async def test_adjustments_filter_and_page_in_the_store(app, http, world):  # type: ignore[no-untyped-def]
    """``/adjustments/{site}`` filters by user or account in the store (one document,
    not ``$and``) and walks to the same rows page by page as in one page."""
    olga = await bearer(app, "olga")
    made = [("alice", None, "a1"), ("bob", None, "b1"), (None, "lab", "l1"),
            ("alice", None, "a2"), (None, "lab", "l2")]
    for user, account, reason in made:
        body = {"user": user, "account": account, "cpu_minutes": 5, "reason": reason}
        r = await http.post("/api/v1/adjustments/farm", headers=olga,
                            json={k: v for k, v in body.items() if v is not None})
        assert r.status_code == 201, r.text
    for params, reasons in (({}, {"a1", "a2", "b1", "l1", "l2"}),
                            ({"user": "alice"}, {"a1", "a2"}),
                            ({"account": "lab"}, {"l1", "l2"}), ({"user": "carl"}, set())):
        whole = (await http.get("/api/v1/adjustments/farm", headers=olga,
                                params={**params, "limit": 1000})).json()
        assert {row["reason"] for row in whole["items"]} == reasons, params
        assert whole["total"] == len(reasons)
        walked = []
        for offset in range(len(reasons) + 2):
            body = (await http.get("/api/v1/adjustments/farm", headers=olga,
                                   params={**params, "limit": 1, "offset": offset})).json()
            assert body["total"] == len(reasons)
            walked += body["items"]
        assert walked == whole["items"], params

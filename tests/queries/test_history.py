"""Reading the audit log: newest first, filters by operation and author, inclusive
``since``/``until`` bounds, and a limit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cheeto_like.models import History
from cheeto_like.queries.history import find_history

from ..factories import AUTHOR, history, make_site

T0 = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
async def log(empty_db):
    """Six rows one minute apart: ops alternate create_site/remove_site, authors a/b/c."""
    for i in range(6):
        await History(op="create_site" if i % 2 == 0 else "remove_site",
                      author="abc"[i % 3], changes={"i": i},
                      timestamp=T0 + timedelta(minutes=i)).insert()
    return empty_db


def order(rows: list[History]) -> list[int]:
    return [r.changes["i"] for r in rows]


async def test_newest_first(log):
    assert order(await find_history()) == [5, 4, 3, 2, 1, 0]


async def test_filter_by_op(log):
    assert order(await find_history(op="create_site")) == [4, 2, 0]
    assert await find_history(op="nothing") == []


async def test_filter_by_author(log):
    assert order(await find_history(author="a")) == [3, 0]


async def test_since_and_until_are_inclusive(log):
    rows = await find_history(since=T0 + timedelta(minutes=1), until=T0 + timedelta(minutes=3))
    assert order(rows) == [3, 2, 1]
    assert order(await find_history(since=T0 + timedelta(minutes=5))) == [5]
    assert order(await find_history(until=T0)) == [0]


async def test_bounds_in_another_time_zone(log):
    from datetime import timezone

    pacific = timezone(timedelta(hours=-7))
    since = (T0 + timedelta(minutes=4)).astimezone(pacific)
    assert order(await find_history(since=since)) == [5, 4]


async def test_filters_combine(log):
    rows = await find_history(op="remove_site", author="c", since=T0)
    assert order(rows) == [5]


async def test_limit(log):
    assert order(await find_history(limit=2)) == [5, 4]
    assert order(await find_history(op="remove_site", limit=1)) == [5]


async def test_rows_written_by_operations_are_found(empty_db):
    await make_site(empty_db, "farm")
    [row] = await find_history(op="create_site", author=AUTHOR)
    assert row.changes["site"] == "farm"
    assert [r.id for r in await history()] == [row.id]

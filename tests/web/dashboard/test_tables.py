"""``web/dashboard/tables.py`` without a browser: the query string read and refused
(400, never a 500), rows searched, sorted and paged in Python, and the same done by the
store (a projected find against the real test store: History rows, no model built); the
macro's links carry the page's own parameters and escape what they hold."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from cheeto_like.models import History
from cheeto_like.store import Store
from cheeto_like.web.dashboard.render import environment
from cheeto_like.web.dashboard.session import Refused
from cheeto_like.web.dashboard.tables import Column, Table, read_params

PEOPLE = Table("people", (Column("name", "Name"), Column("team", "Team"),
                          Column("hours", "Hours", numeric=True),
                          Column("", "", sortable=False)),
               default_sort="name", per_page=3)
OTHER = Table("other", (Column("op", "Operation"), Column("when", "When"),
                        Column("detail", "Detail", sortable=False)),
              default_sort="when", default_dir="desc", per_page=2, searchable=False)
ROWS = [{"name": "carol", "team": "lab", "hours": 5.0}, {"name": "alice", "team": "proj",
                                                         "hours": None},
        {"name": "Bob", "team": "lab", "hours": 12.5}, {"name": "dave", "team": "Lab2",
                                                        "hours": 0.0},
        {"name": "erin", "team": "proj", "hours": 7.0}]


def read(**params: str) -> dict[str, Any]:
    return read_params({k: [v] for k, v in params.items()}, [PEOPLE, OTHER],
                       keep={"site": "farm", "empty": ""})


def names(page: Any) -> list[str]:
    return [r["name"] for r in page.rows]


def test_defaults_when_nothing_is_asked() -> None:
    states = read()
    people, other = states["people"], states["other"]
    assert (people.sort, people.dir, people.q, people.page) == ("name", "asc", "", 1)
    assert (other.sort, other.dir) == ("when", "desc")
    assert names(people.apply(ROWS)) == ["alice", "Bob", "carol"]  # case-insensitive


def test_sort_both_ways_with_missing_values_last() -> None:
    up = read(sort="hours", dir="asc")["people"].apply(ROWS)
    assert names(up) == ["dave", "carol", "erin"]
    down = read(sort="hours", dir="desc")["people"]
    assert names(down.apply(ROWS)) == ["Bob", "erin", "carol"]
    last = read(sort="hours", dir="desc", page="2")["people"].apply(ROWS)
    assert names(last) == ["dave", "alice"]  # None after every number, either way
    assert (last.page, last.pages, last.first, last.last, last.total) == (2, 2, 4, 5, 5)


def test_a_numeric_column_first_sorts_largest_first() -> None:
    assert read(sort="hours")["people"].dir == "desc"
    state = read()["people"]
    assert "dir=desc" in state.sort_url("hours")
    assert "dir=desc" in state.sort_url("name")  # the sorted column toggles
    assert "dir=asc" in state.sort_url("team")


def test_search_is_a_case_insensitive_substring_of_any_column() -> None:
    found = read(q="LAB")["people"].apply(ROWS)
    assert names(found) == ["Bob", "carol", "dave"] and found.total == 3
    assert read(q="12.5")["people"].apply(ROWS).total == 1
    assert read(q="nobody")["people"].apply(ROWS).rows == []


def test_a_page_past_the_end_shows_the_last() -> None:
    found = read(page="40")["people"].apply(ROWS)
    assert found.page == 2 and names(found) == ["dave", "erin"]
    assert read(page="3")["people"].apply([]).page == 1


def test_t_names_the_table_the_parameters_apply_to() -> None:
    states = read(t="other", sort="op", page="2")
    assert (states["other"].sort, states["other"].page, states["other"].dir) == ("op", 2,
                                                                                 "asc")
    assert states["people"].sort == "name" and states["people"].page == 1


@pytest.mark.parametrize("params", [
    {"sort": "nope"}, {"sort": "__class__"}, {"t": "other", "sort": "name"},
    {"sort": "hours", "dir": "up"}, {"page": "0"}, {"page": "-1"}, {"page": "x"},
    {"page": "1.5"}, {"page": "²"}, {"page": "99999999999"}, {"t": "nope"},
    {"q": "x" * 101}, {"q": "a\nb"}, {"t": "other", "q": "x"},
])
def test_bad_parameters_are_refused_with_400(params: dict[str, str]) -> None:
    with pytest.raises(Refused) as caught:
        read(**params)
    assert caught.value.status == 400


def test_an_unsortable_column_and_a_repeated_parameter_are_refused() -> None:
    with pytest.raises(Refused):
        read(t="other", sort="detail")
    assert read(sort="")["people"].sort == "name"  # empty: the default
    with pytest.raises(Refused) as caught:
        read_params({"page": ["1", "2"]}, [PEOPLE])
    assert caught.value.status == 400


def test_urls_keep_the_page_parameters_and_leave_defaults_out() -> None:
    state = read(q="a&b", page="2")["people"]
    query = parse_qs(urlsplit(state.url(page=3)).query)
    assert query == {"site": ["farm"], "t": ["people"], "q": ["a&b"], "page": ["3"]}
    assert urlsplit(state.url()).fragment == "t-people"
    assert "page" not in parse_qs(urlsplit(state.url(page=1)).query)
    assert ("t", "people") in state.hidden() and ("site", "farm") in state.hidden()


def test_the_macro_renders_links_search_count_and_pages_escaped() -> None:
    template = environment().from_string(
        '{% from "macros.html" import table %}'
        '{% call(row) table(pg, "people-table") %}<tr><td>{{ row.name }}</td>'
        '<td>{{ row.team }}</td><td>{{ row.hours }}</td><td></td></tr>{% endcall %}')
    rows = [*ROWS, {"name": "<b>x</b>", "team": "lab", "hours": 1.0}]
    state = read_params({"q": ["<b>"]}, [PEOPLE], keep={"site": "f\"&<"})["people"]
    html = template.render(pg=state.apply(rows))
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html
    assert 'id="sort-people-hours"' in html and 'aria-sort="ascending"' in html
    assert 'value="f&#34;&amp;&lt;"' in html  # the kept site, escaped
    assert "1–1 of 1 rows" in html and "matching" in html
    assert 'class="pager"' not in html  # one page: no page links
    paged = template.render(pg=read_params({}, [PEOPLE])["people"].apply(ROWS))
    assert 'id="page-people-2"' in paged and 'id="next-people"' in paged
    assert "1–3 of 5 rows" in paged
    empty = template.render(pg=read_params({"q": ["zz"]}, [PEOPLE])["people"].apply(ROWS))
    assert "nothing matches" in empty


def test_page_links_leave_gaps() -> None:
    table = Table("n", (Column("v", "V", numeric=True),), default_sort="v", per_page=1)
    rows = [{"v": i} for i in range(20)]
    page = read_params({"page": ["10"]}, [table])["n"].apply(rows)
    assert page.links() == [1, None, 8, 9, 10, 11, 12, None, 20]


HISTORY = Table("history", (Column("timestamp", "When"), Column("op", "Operation"),
                            Column("author", "By"), Column("subject", "Subject",
                                                           field="changes.name")),
                default_sort="timestamp", default_dir="desc", per_page=4, tiebreak="_id")


@pytest.fixture
async def history(empty_db: Store) -> Store:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    for n in range(10):
        await History(op="create_user" if n % 2 else "set_quota", author=f"admin{n % 3}",
                      timestamp=base + timedelta(hours=n),
                      changes={"name": f"user{n}"}).insert()
    return empty_db


async def test_the_store_sorts_searches_and_pages(history: Store) -> None:
    fields = ("timestamp", "op", "author", "changes.name")
    first = await read_params({}, [HISTORY])["history"].query(History, {}, *fields)
    assert first.total == 10 and first.pages == 3
    assert [r["changes"]["name"] for r in first.rows] == ["user9", "user8", "user7", "user6"]
    assert all(set(r) == {"timestamp", "op", "author", "changes"} for r in first.rows)
    last = await read_params({"page": ["3"]}, [HISTORY])["history"].query(History, {},
                                                                          *fields)
    assert [r["changes"]["name"] for r in last.rows] == ["user1", "user0"]
    by_op = await read_params({"sort": ["op"], "dir": ["asc"], "page": ["2"]},
                              [HISTORY])["history"].query(History, {}, *fields)
    assert [r["op"] for r in by_op.rows] == ["create_user", "set_quota", "set_quota",
                                             "set_quota"]
    found = await read_params({"q": ["ADMIN2"]}, [HISTORY])["history"].query(
        History, {"op": "set_quota"}, *fields)
    assert found.total == 2 and {r["author"] for r in found.rows} == {"admin2"}
    subject = await read_params({"q": ["user7"]}, [HISTORY])["history"].query(
        History, {}, *fields)
    assert [r["changes"]["name"] for r in subject.rows] == ["user7"]
    dots = await read_params({"q": [".*"]}, [HISTORY])["history"].query(History, {},
                                                                        *fields)
    assert dots.total == 0  # the search is text, not a pattern
    past = await read_params({"page": ["9"]}, [HISTORY])["history"].query(History, {},
                                                                          *fields)
    assert past.page == 3 and len(past.rows) == 2


async def test_a_time_range_is_counted_as_it_is_read(history: Store) -> None:
    """The embedded store's ``$match`` ignores a datetime range (its ``find`` does not):
    the total must count what the pages show."""
    since = {"timestamp": {"$gte": datetime(2026, 1, 1, 6, tzinfo=UTC)}}
    page = await read_params({}, [HISTORY])["history"].query(History, since, "op")
    assert page.total == 4 and len(page.rows) == 4 and page.pages == 1

"""Tables that sort, search and page on the server: plain links and a GET form, no
JavaScript.

How a page uses it (three steps):

1. Describe the table once, at module level::

       from .tables import Column, Table

       MEMBERS = Table("members", (Column("name", "Member"), Column("status", "Status"),
                                   Column("used_h", "Used (h)", numeric=True),
                                   Column("", "")),          # an unsortable cell (buttons)
                       default_sort="used_h", default_dir="desc", per_page=25)

   ``Column(key, label)``: ``key`` is what ``?sort=`` names and, for rows read here, the
   dict key or attribute holding the value (``get=`` a function of the row instead;
   ``field=`` the stored field when the store sorts it; ``search_fields=`` the stored
   fields the store searches for it). ``search=False`` leaves a column out of ``?q=``;
   ``sortable=False`` makes a plain header; ``numeric=True`` right-aligns it and sorts
   it largest first when its header is first clicked.

2. In the handler, read the query string (a bad one is ``Refused(…, 400)``: the guard's
   HTML page, never a 500), then page the rows::

       states = read_tables(request, MEMBERS, HISTORY, keep={"site": site})
       members = states["members"].apply(rows)             # small lists: in Python
       history = await states["history"].query(History, match, "op", "author", …)  # big

   ``keep``: the page's own parameters that every sort/search/page link carries (the
   site, a filter form's values). The query string is ``?t=<table>&sort=<column>&dir=
   asc|desc&q=<text>&page=<n>`` plus ``keep``: the parameters apply to the table ``t``
   names (the page's first table when ``t`` is absent); the page's other tables show
   their first page. ``apply`` filters (``q``: case-insensitive substring of any
   searchable column), sorts (None last) and cuts a page; ``query`` does the same in
   the store (a projected ``find`` with sort/skip/limit and ``models.base.count``: no
   model per document), for users, History, runs and other site-wide collections.
   Both return a ``Page``: ``rows``, ``total``, ``page``, ``pages``, ``state``.

3. In the template::

       {% from "macros.html" import table %}
       {% call(row) table(members, "members-table", empty="no members") %}
         <tr id="member-{{ row.name }}"><td>{{ row.name }}</td>…</tr>
       {% endcall %}

   The macro renders the search box (a GET form carrying ``keep``), the header links
   (each toggles the direction of its column; ``aria-sort`` on the sorted one), the
   caller's ``<tr>`` per row, the row count and the page links, inside a box that
   scrolls sideways on its own on a narrow screen (``div.table-wrap``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request

from .session import Refused

PARAMS = ("t", "sort", "dir", "q", "page")
MAX_QUERY = 100  # characters of ?q=
MAX_PAGE = 1_000_000


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    sortable: bool = True
    search: bool = True
    numeric: bool = False  # a right-aligned number column
    field: str | None = None  # the stored field (query-side sort and search); else key
    get: Callable[[Any], Any] | None = None  # the value of a row here; else key
    # the stored fields ``?q=`` searches for this column in the store (else ``stored``)
    search_fields: tuple[str, ...] = ()

    @property
    def stored(self) -> str:
        return self.field or self.key

    def value(self, row: Any) -> Any:
        if self.get is not None:
            return self.get(row)
        if isinstance(row, Mapping):
            return row.get(self.key)
        return getattr(row, self.key, None)


@dataclass(frozen=True)
class Table:
    name: str  # ``?t=`` and the HTML ids (``t-<name>``)
    columns: tuple[Column, ...]
    default_sort: str
    default_dir: str = "asc"
    per_page: int = 25
    searchable: bool = True
    # a secondary sort key for ties (the store: a unique field keeps pages stable)
    tiebreak: str | None = None

    def column(self, key: str) -> Column | None:
        for c in self.columns:
            if c.key == key and c.key:
                return c
        return None

    def __post_init__(self) -> None:
        assert self.column(self.default_sort) is not None, self.default_sort
        assert self.default_dir in ("asc", "desc")


@dataclass(frozen=True)
class TableState:
    """What the query string asks of one table."""

    table: Table
    sort: str
    dir: str
    q: str = ""
    page: int = 1
    keep: tuple[tuple[str, str], ...] = ()
    chosen: bool = False  # ``t`` named this table
    path: str = ""  # the page's path: links and the search form go there

    @property
    def name(self) -> str:
        return self.table.name

    @property
    def column(self) -> Column:
        found = self.table.column(self.sort)
        assert found is not None
        return found

    @property
    def skip(self) -> int:
        return (self.page - 1) * self.table.per_page

    def url(self, **changes: Any) -> str:
        """The query string (with ``?``) of this table with ``changes`` (sort, dir, q,
        page) and the page's ``keep`` parameters; defaults are left out."""
        now = {"sort": self.sort, "dir": self.dir, "q": self.q, "page": self.page} | changes
        pairs = [(k, v) for k, v in self.keep if v not in (None, "")]
        pairs.append(("t", self.name))
        if now["sort"] != self.table.default_sort or now["dir"] != self.table.default_dir:
            pairs += [("sort", now["sort"]), ("dir", now["dir"])]
        if now["q"]:
            pairs.append(("q", now["q"]))
        if int(now["page"]) != 1:
            pairs.append(("page", str(now["page"])))
        return f"{self.path}?{urlencode(pairs)}#t-{self.name}"

    def sort_url(self, key: str) -> str:
        """The link of a header: the other direction when it is the sorted column,
        else that column in its natural direction (numbers: largest first)."""
        column = self.table.column(key)
        if key == self.sort:
            direction = "asc" if self.dir == "desc" else "desc"
        else:
            direction = "desc" if column is not None and column.numeric else "asc"
        return self.url(sort=key, dir=direction, page=1)

    def hidden(self) -> list[tuple[str, str]]:
        """The search form's hidden inputs: ``keep``, ``t`` and the sort."""
        pairs = [(k, v) for k, v in self.keep if v not in (None, "")]
        return [*pairs, ("t", self.name), ("sort", self.sort), ("dir", self.dir)]

    # -- in Python -----------------------------------------------------------------------

    def apply(self, rows: Iterable[Any]) -> Page:
        """Search, sort and cut ``rows`` (dicts or objects) here: for the small lists a
        page has already read."""
        found = list(rows)
        if self.q:
            needle = self.q.casefold()
            searched = [c for c in self.table.columns if c.key and c.search]
            found = [r for r in found
                     if any(needle in _text(c.value(r)).casefold() for c in searched)]
        column = self.column
        present = [r for r in found if column.value(r) is not None]
        absent = [r for r in found if column.value(r) is None]
        present.sort(key=lambda r: _sort_key(column.value(r)), reverse=self.dir == "desc")
        found = present + absent
        state = self._clamped(len(found))
        return Page(found[state.skip:state.skip + self.table.per_page], len(found), state)

    # -- in the store --------------------------------------------------------------------

    def match(self, match: Mapping[str, Any]) -> dict[str, Any]:
        """``match`` and the search: a case-insensitive substring of any searchable
        column's stored field."""
        out = dict(match)
        if self.q:
            pattern = {"$regex": re.escape(self.q), "$options": "i"}
            searched = [{name: pattern} for c in self.table.columns if c.key and c.search
                        for name in (c.search_fields or (c.stored,))]
            if searched:
                out = {"$and": [out, {"$or": searched}]} if out else {"$or": searched}
        return out

    def mongo_sort(self) -> list[tuple[str, int]]:
        order = -1 if self.dir == "desc" else 1
        keys = [(self.column.stored, order)]
        if self.table.tiebreak and self.table.tiebreak != self.column.stored:
            keys.append((self.table.tiebreak, order))
        return keys

    async def query(self, model: Any, match: Mapping[str, Any], *fields: str,
                    session: Any = None) -> Page:
        """One page of ``model``'s documents matching ``match`` (and the search), sorted
        and cut by the store: a projected ``find`` (raw dicts holding ``fields``, no
        model built) and one count."""
        from ...models.base import count

        where = self.match(match)
        if _holds_datetime(where):  # the embedded store's $match ignores a datetime range
            total = await model.get_pymongo_collection().count_documents(where,
                                                                         session=session)
        else:
            total = await count(model, where, session=session)
        page = self._clamped(total)
        projection: dict[str, int] = {f: 1 for f in fields}
        if "_id" not in projection:
            projection["_id"] = 0
        cursor = model.get_pymongo_collection().find(where, projection, session=session)
        cursor = cursor.sort(page.mongo_sort()).skip(page.skip).limit(self.table.per_page)
        return Page([_nested(row, fields) for row in await cursor.to_list()], total, page)

    # -- both ----------------------------------------------------------------------------

    def _clamped(self, total: int) -> TableState:
        """A page past the end (the rows changed since the link was made) is the last."""
        pages = max(1, math.ceil(total / self.table.per_page))
        return self if self.page <= pages else replace(self, page=pages)


@dataclass(frozen=True)
class Page:
    rows: list[Any]
    total: int
    state: TableState

    @property
    def page(self) -> int:
        return self.state.page

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.state.table.per_page))

    @property
    def first(self) -> int:
        """The number of the first row shown (1-based; 0 when none)."""
        return self.state.skip + 1 if self.rows else 0

    @property
    def last(self) -> int:
        return self.state.skip + len(self.rows)

    def links(self) -> list[int | None]:
        """The page numbers to link: the first, the last, and two either side of the
        current one (None: a gap)."""
        shown = sorted({1, self.pages, *range(max(1, self.page - 2),
                                              min(self.pages, self.page + 2) + 1)})
        out: list[int | None] = []
        for n in shown:
            if out and n - (out[-1] or 0) > 1:
                out.append(None)
            out.append(n)
        return out


def _holds_datetime(value: Any) -> bool:
    """Whether a filter compares a datetime: ``models.base.count`` (an aggregation) would
    count every document on the embedded store, whose ``$match`` stage does not compare
    datetimes (its ``find`` does); ``count_documents`` is slower there but right."""
    if isinstance(value, datetime):
        return True
    if isinstance(value, Mapping):
        return any(_holds_datetime(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_holds_datetime(v) for v in value)
    return False


def _nested(row: dict[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """A dotted field as MongoDB answers it (``{"a": {"b": 1}}``): the embedded store
    answers ``{"a.b": 1}``."""
    for name in fields:
        if "." in name and name in row:
            value = row.pop(name)
            *parents, leaf = name.split(".")
            node = row
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
    return row


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list | tuple | set | frozenset):
        return " ".join(_text(v) for v in value)
    return str(value)


def _sort_key(value: Any) -> Any:
    if isinstance(value, bool):
        return (0, int(value), "")
    if isinstance(value, int | float):
        return (0, value, "")
    if isinstance(value, str):
        return (1, 0, value.casefold())
    if hasattr(value, "timestamp"):
        return (0, value.timestamp(), "")
    return (1, 0, _text(value).casefold())


def read_tables(request: Request, *tables: Table, keep: Mapping[str, str | None] | None = None,
                path: str | None = None, others: Iterable[str] = ()) -> dict[str, TableState]:
    """The state of each of the page's ``tables`` from the query string (see the module
    doc); a parameter that names no table, no column of its table, a direction other
    than asc/desc, a page that is not a positive whole number, or a search longer than
    ``MAX_QUERY`` characters or holding control characters is ``Refused(…, 400)``.
    ``path``: where the links go (the page's GET path; default the request's, which a
    form's POST answer must override). ``others``: the names of tables the page reads
    elsewhere (``read_params`` on their own): a ``t`` naming one of them leaves these
    at their defaults."""
    params = request.query_params
    return read_params({k: params.getlist(k) for k in PARAMS if k in params}, tables,
                       keep=keep, path=request.url.path if path is None else path,
                       others=others)


def read_params(params: Mapping[str, Sequence[str]], tables: Sequence[Table], *,
                keep: Mapping[str, str | None] | None = None, path: str = "",
                others: Iterable[str] = ()) -> dict[str, TableState]:
    """``read_tables`` of an already parsed query string (``{name: [values]}``)."""
    assert tables
    kept = tuple((k, str(v)) for k, v in (keep or {}).items() if v not in (None, ""))
    for name, values in params.items():
        if name in PARAMS and len(values) > 1:
            raise Refused(f"the parameter {name!r} is given {len(values)} times", 400)

    def one(name: str) -> str:
        values = params.get(name) or [""]
        return values[0]

    names = {t.name: t for t in tables}
    states = {t.name: TableState(t, t.default_sort, t.default_dir, keep=kept, path=path)
              for t in tables}
    asked = one("t") or tables[0].name
    if asked in set(others) - set(names):
        return states
    if asked not in names:
        raise Refused(f"this page has no table {asked!r} (tables: {', '.join(names)})", 400)
    chosen = names[asked]
    sort = one("sort") or chosen.default_sort
    column = chosen.column(sort)
    if column is None or not column.sortable:
        sortable = ", ".join(c.key for c in chosen.columns if c.key and c.sortable)
        raise Refused(f"the table {asked!r} cannot be sorted by {sort!r} "
                      f"(columns: {sortable})", 400)
    direction = one("dir") or (chosen.default_dir if sort == chosen.default_sort
                               else "desc" if column.numeric else "asc")
    if direction not in ("asc", "desc"):
        raise Refused(f"dir must be asc or desc, not {direction[:20]!r}", 400)
    q = one("q").strip()
    if len(q) > MAX_QUERY or any(ord(c) < 32 or ord(c) == 127 for c in q):
        raise Refused(f"the search must be at most {MAX_QUERY} characters on one line", 400)
    if q and not chosen.searchable:
        raise Refused(f"the table {asked!r} cannot be searched", 400)
    text = one("page") or "1"
    if not re.fullmatch(r"[0-9]{1,7}", text) or not 1 <= int(text) <= MAX_PAGE:
        raise Refused(f"page must be a whole number from 1, not {text[:20]!r}", 400)
    states[asked] = TableState(chosen, sort, direction, q, int(text), kept, chosen=True,
                               path=path)
    return states

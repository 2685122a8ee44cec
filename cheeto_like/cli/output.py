"""Output rules (DESIGN §7): humans read rich tables and panels on stderr; machines read
``--yaml``/``--json`` (and raw exports) on stdout, with nothing else mixed in.

Commands build plain data (dicts, lists of dicts) once and hand it to ``Output``, which
renders either form, so the two never drift apart.
"""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import date, datetime
from typing import IO, TYPE_CHECKING, Any, Literal

from rich.console import Console
from rich.errors import MarkupError
from rich.logging import RichHandler
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..text import show_controls

if TYPE_CHECKING:
    from .progress import Step

Format = Literal["human", "yaml", "json"]
NONE_TEXT = "[dim](none)[/]"


def plain(value: Any) -> Any:
    """Convert to JSON/YAML-safe data: datetimes become ISO strings, tuples lists."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = [plain(v) for v in value]
        return sorted(items) if isinstance(value, set | frozenset) else items
    return value


def esc(value: Any) -> str:
    """``value`` as literal text inside a markup message: rich markup escaped and control
    characters shown as escapes. Every value interpolated into an ``Output`` message goes
    through this (a tripwire test checks), so user data is never read as markup."""
    return escape(show_controls(str(value)))


def _cell(value: Any) -> str:
    if value is None or value == "" or value == [] or value == {}:
        return NONE_TEXT
    if isinstance(value, bool):
        return "[green]yes[/]" if value else "[dim]no[/]"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S %Z").strip()
    if isinstance(value, list | tuple):
        return ", ".join(esc(_flat(v)) for v in value)
    return esc(value)


def _flat(value: Any) -> str:
    """A value inside a cell as text: a mapping as ``k=v`` pairs, a list as ``a,b`` (never
    a Python repr such as ``qos=['normal']``), nothing as ``-``."""
    if isinstance(value, Mapping):
        return " ".join(f"{k}={_flat(v)}" for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        items = [_flat(v) for v in value]
        return ",".join(sorted(items) if isinstance(value, set | frozenset) else items) or "-"
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


class LogHandler(RichHandler):
    """Log records on the human stream: never markup, control characters escaped (log
    messages carry user data such as an operation's changes)."""

    def render_message(self, record: logging.LogRecord, message: str) -> Any:
        return super().render_message(record, show_controls(message, keep_newlines=True))


class Output:
    """The two output streams of one command invocation."""

    def __init__(self, fmt: Format = "human", *, stdout: IO[str] | None = None,
                 stderr: IO[str] | None = None, quiet: bool = False) -> None:
        self.fmt = fmt
        self.stdout = stdout if stdout is not None else sys.stdout
        self.stderr = stderr if stderr is not None else sys.stderr
        self.quiet = quiet
        interactive = self.stderr.isatty()
        # Off a terminal (logs, pipes, tests) there is no width to fit: keep rows whole.
        # No emoji codes: a value like ":smile:" or a time "1:cd:2" stays as typed.
        self.console = Console(file=self.stderr, highlight=False, emoji=False,
                               width=None if interactive else 200)

    @property
    def machine(self) -> bool:
        return self.fmt != "human"

    # -- human messages (stderr) --------------------------------------------------------

    # ``info``/``success``/``warn`` take markup written by us, with every interpolated
    # value passed through ``esc()``; ``error`` takes plain text (exception messages).

    def _markup(self, prefix: str, message: str) -> None:
        message = show_controls(message, keep_newlines=True)
        try:
            text = Text.from_markup(prefix + message, emoji=False)
        except MarkupError:  # a value that missed esc(): print it literally, never crash
            text = Text.from_markup(prefix, emoji=False) + Text(message)
        self.console.print(text, soft_wrap=True)  # one message, one line (never re-wrapped)

    def info(self, message: str) -> None:
        if not self.quiet:
            self._markup("", message)

    def success(self, message: str) -> None:
        if not self.quiet:
            self._markup("[green]✓[/] ", message)

    def warn(self, message: str) -> None:
        self._markup("[yellow]warning:[/] ", message)

    def error(self, message: str) -> None:
        self.console.print(f"[bold red]error:[/] {esc(message)}", soft_wrap=True)

    def text(self, text: str, *, end: str = "\n") -> None:
        """Plain text (a file's content, a diff) on the human stream: no markup, control
        characters shown as escapes."""
        self.console.print(Text(show_controls(text, keep_newlines=True)), end=end)

    # -- machine output (stdout) --------------------------------------------------------

    # -- progress of long work (stderr, terminals only) ----------------------------------

    def progress(self, label: str, total: int | None = None) -> AbstractContextManager[Step]:
        """A progress bar for long work, drawn only when stderr is a terminal (never with
        ``--quiet``). Yields a callback ``step(n=1)``; inside the block, operations and
        reconcilers report through ``cheeto_like.progress`` (``begin``/``advance``)."""
        from .progress import progress_bar

        drawn = not self.quiet and self.stderr.isatty()
        return progress_bar(self.console if drawn else None, label, total)

    def write_raw(self, text: str) -> None:
        self.stdout.write(text)
        self.stdout.flush()

    def write_data(self, data: Any) -> None:
        data = plain(data)
        if self.fmt == "json":
            self.write_raw(json.dumps(data, indent=2, sort_keys=False) + "\n")
        else:
            buffer = io.StringIO()
            from ruamel.yaml import YAML  # only --yaml needs it: keep it off start-up

            yaml = YAML(typ="safe", pure=True)
            yaml.default_flow_style = False
            yaml.dump(data, buffer)
            self.write_raw(buffer.getvalue())

    # -- combined: data for machines, a rendering for humans ----------------------------

    def show(self, data: Mapping[str, Any], *, title: str) -> None:
        """One record: a panel of key/value rows (nested mappings become sub-tables)."""
        if self.machine:
            self.write_data(data)
        else:
            # the title as Text without emoji codes, like every other string we print
            # (a str title is parsed with them, and loads rich's emoji table, ~4 ms)
            heading = Text.from_markup(f"[bold]{esc(title)}", emoji=False)
            self.console.print(Panel(self._mapping_table(data), title=heading, expand=False))

    def table(self, rows: Sequence[Mapping[str, Any]], *, title: str,
              columns: Sequence[str] | None = None, data: Any = None) -> None:
        """Several records: a titled table for humans, the full rows (or ``data``) for
        machines."""
        if self.machine:
            self.write_data(list(rows) if data is None else data)
            return
        cols = list(columns) if columns else (list(rows[0].keys()) if rows else [])
        table = Table(title=esc(title), title_justify="left", header_style="bold cyan")
        for col in cols:
            table.add_column(esc(col.replace("_", " ")))
        for row in rows:
            table.add_row(*(_cell(row.get(c)) for c in cols))
        self.console.print(table)

    def _mapping_table(self, data: Mapping[str, Any]) -> Table:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold cyan", no_wrap=True)
        grid.add_column()
        for key, value in data.items():
            label = esc(key.replace("_", " "))
            if isinstance(value, Mapping) and value:
                grid.add_row(label, self._mapping_table(value))
            elif (isinstance(value, list) and value
                  and all(isinstance(v, Mapping) for v in value)):
                grid.add_row(label, self._rows_table(value))
            else:
                grid.add_row(label, _cell(value))
        return grid

    @staticmethod
    def _rows_table(rows: Sequence[Mapping[str, Any]]) -> Table:
        cols = list(dict.fromkeys(k for row in rows for k in row))
        table = Table(show_edge=False, header_style="cyan", pad_edge=False)
        for col in cols:
            table.add_column(esc(col.replace("_", " ")))
        for row in rows:
            table.add_row(*(_cell(row.get(c)) for c in cols))
        return table

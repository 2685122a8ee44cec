"""Output rules (DESIGN §7): humans read rich tables and panels on stderr; machines read
``--yaml``/``--json`` (and raw exports) on stdout, with nothing else mixed in.

Commands build plain data (dicts, lists of dicts) once and hand it to ``Output``, which
renders either form, so the two never drift apart.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import IO, Any, Literal

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from ruamel.yaml import YAML

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


def _cell(value: Any) -> str:
    if value is None or value == "" or value == [] or value == {}:
        return NONE_TEXT
    if isinstance(value, bool):
        return "[green]yes[/]" if value else "[dim]no[/]"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S %Z").strip()
    if isinstance(value, list | tuple):
        return ", ".join(escape(str(_flat(v))) for v in value)
    return escape(str(value))


def _flat(value: Any) -> str:
    if isinstance(value, Mapping):
        return " ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


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
        self.console = Console(file=self.stderr, highlight=False,
                               width=None if interactive else 200)

    @property
    def machine(self) -> bool:
        return self.fmt != "human"

    # -- human messages (stderr) --------------------------------------------------------

    def info(self, message: str) -> None:
        if not self.quiet:
            self.console.print(message)

    def success(self, message: str) -> None:
        if not self.quiet:
            self.console.print(f"[green]✓[/] {message}")

    def warn(self, message: str) -> None:
        self.console.print(f"[yellow]warning:[/] {message}")

    def error(self, message: str) -> None:
        self.console.print(f"[bold red]error:[/] {escape(message)}")

    # -- machine output (stdout) --------------------------------------------------------

    def write_raw(self, text: str) -> None:
        self.stdout.write(text)
        self.stdout.flush()

    def write_data(self, data: Any) -> None:
        data = plain(data)
        if self.fmt == "json":
            self.write_raw(json.dumps(data, indent=2, sort_keys=False) + "\n")
        else:
            buffer = io.StringIO()
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
            self.console.print(Panel(self._mapping_table(data), title=f"[bold]{escape(title)}",
                                     expand=False))

    def table(self, rows: Sequence[Mapping[str, Any]], *, title: str,
              columns: Sequence[str] | None = None, data: Any = None) -> None:
        """Several records: a titled table for humans, the full rows (or ``data``) for
        machines."""
        if self.machine:
            self.write_data(list(rows) if data is None else data)
            return
        cols = list(columns) if columns else (list(rows[0].keys()) if rows else [])
        table = Table(title=title, title_justify="left", header_style="bold cyan")
        for col in cols:
            table.add_column(col.replace("_", " "))
        for row in rows:
            table.add_row(*(_cell(row.get(c)) for c in cols))
        self.console.print(table)

    def _mapping_table(self, data: Mapping[str, Any]) -> Table:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold cyan", no_wrap=True)
        grid.add_column()
        for key, value in data.items():
            label = key.replace("_", " ")
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
            table.add_column(col.replace("_", " "))
        for row in rows:
            table.add_row(*(_cell(row.get(c)) for c in cols))
        return table

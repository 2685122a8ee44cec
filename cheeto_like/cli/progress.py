"""The terminal side of ``cheeto_like.progress``: a rich bar on stderr, drawn only when
stderr is a terminal, so pipes, logs, tests and ``--quiet`` stay byte-for-byte silent."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from .. import progress

if TYPE_CHECKING:
    from rich.console import Console


class Step:
    """The callback handed to the caller: ``step(n=1)`` advances the bar."""

    def __init__(self, bar: Any = None, label: str = "", total: int | None = None) -> None:
        self._bar = bar
        self._task = None if bar is None else bar.add_task(escape(label), total=total)

    def __call__(self, n: int = 1) -> None:
        self.advance(n)

    def begin(self, total: int | None, label: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, total=total, completed=0, description=escape(label))

    def advance(self, n: int = 1) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, n)


@contextmanager
def progress_bar(console: Console | None, label: str,
                 total: int | None = None) -> Iterator[Step]:
    """A bar drawn on ``console`` (stderr's; None: draw nothing, ``--quiet`` or not a
    terminal). Takes the console, not ``output.Output``, which imports this module."""
    if console is None:
        step = Step()
        with progress.reporting(None):
            yield step
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
               MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        step = Step(bar, label, total)
        with progress.reporting(step):
            yield step

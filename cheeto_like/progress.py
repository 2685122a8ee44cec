"""Progress of long work: class batches, LDAP and Slurm applies, IAM sync-all, exports.

Deep code reports through this module rather than through a parameter threaded through
every layer: ``begin(total, label)`` once it knows how much work there is, ``advance()``
after each unit. Both do nothing unless a caller installed a reporter with
``reporting()``; the CLI does so (``ctx.out.progress``) only when stderr is a terminal,
so daemon runs, pipes and tests pay a context-variable lookup and nothing else. The
variable is copied into ``asyncio.to_thread`` workers, so work done there reports too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol


class Reporter(Protocol):
    def begin(self, total: int | None, label: str) -> None: ...

    def advance(self, n: int = 1) -> None: ...


_current: ContextVar[Reporter | None] = ContextVar("cheeto_progress", default=None)


def begin(total: int | None, label: str) -> None:
    """Start (or restart) the bar: ``total`` units (None: unknown) of ``label``."""
    reporter = _current.get()
    if reporter is not None:
        reporter.begin(total, label)


def advance(n: int = 1) -> None:
    """``n`` more units are done."""
    reporter = _current.get()
    if reporter is not None:
        reporter.advance(n)


@contextmanager
def reporting(reporter: Reporter | None) -> Iterator[None]:
    """Send ``begin``/``advance`` calls made inside the block to ``reporter``."""
    token = _current.set(reporter)
    try:
        yield
    finally:
        _current.reset(token)

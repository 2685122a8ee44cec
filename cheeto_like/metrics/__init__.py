"""Prometheus metrics: a facade that costs nothing until a daemon process turns it on.

Call sites record with ``inc(name, n, **labels)``, ``observe(name, value, **labels)`` and
``set_gauge(name, value, **labels)`` using the names in ``names.SPECS``. In a process
that never called ``activate`` (the CLI, tests that do not ask for it) every call is a
check of one module global and returns: ``prometheus_client`` is not even imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .names import SPECS

if TYPE_CHECKING:
    from .process import Server

_active = False


def activate(role: str, directory: Path | None = None) -> None:
    """Turn recording on in this process and the children it forks (``process.activate``:
    ``directory`` = prometheus_client's multiprocess directory, emptied; None = a plain
    in-process registry)."""
    global _active
    from .process import activate as _activate

    _activate(role, directory)
    _active = True


def start_for(config: Any, role: str, port: int | None, *, name: str = "",
              multiprocess: bool = True) -> Server | None:
    """``process.start_for`` (serve and activate for a daemon process, from the config's
    ``metrics`` section; None when no port is given), with this facade's switch turned on
    when it did."""
    global _active
    from .process import start_for as _start_for

    server = _start_for(config, role, port, name=name, multiprocess=multiprocess)
    if server is not None:
        _active = True
    return server


def join(role: str) -> bool:
    """``process.join``: record into the directory of the server that started this
    process (the site worker's, for its quota agent), with this facade's switch on when
    it could."""
    global _active
    from .process import join as _join

    if _join(role):
        _active = True
    return _active


def child_env() -> dict[str, str]:
    """The environment a child needs to ``join`` this process's metrics (empty when this
    process serves none). Reads the module state only: no prometheus_client import."""
    from .process import child_env as _child_env

    return _child_env()


def add_collector(role: str, collector: Any) -> None:
    """Expose a scrape-time collector on the servers of ``role`` (``"all"``: every one);
    see ``process.add_collector``. Cheap to call in any process: nothing is imported
    until a server scrapes."""
    from .process import add_collector as _add

    _add(role, collector)


def active() -> bool:
    return _active


def inc(name: str, amount: float = 1.0, **labels: str) -> None:
    if _active:
        from .families import family

        family(name, labels).inc(amount)


def observe(name: str, value: float, **labels: str) -> None:
    if _active:
        from .families import family

        family(name, labels).observe(value)


def set_gauge(name: str, value: float, **labels: str) -> None:
    if _active:
        from .families import family

        family(name, labels).set(value)


__all__ = ["SPECS", "activate", "active", "add_collector", "child_env", "inc", "join",
           "observe", "set_gauge"]

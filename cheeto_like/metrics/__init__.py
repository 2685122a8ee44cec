"""Prometheus metrics: a facade that costs nothing until a daemon process turns it on.

Call sites record with ``inc(name, n, **labels)``, ``observe(name, value, **labels)`` and
``set_gauge(name, value, **labels)`` using the names in ``names.SPECS``. In a process
that never called ``activate`` (the CLI, tests that do not ask for it) every call is a
check of one module global and returns: ``prometheus_client`` is not even imported.
"""

from __future__ import annotations

from .names import SPECS

_active = False


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


__all__ = ["SPECS", "active", "inc", "observe", "set_gauge"]

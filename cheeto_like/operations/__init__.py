"""The write path. ``operation_names()``, ``get_operation()`` and ``OPERATIONS`` import
every module in ``MODULES`` first (for ``ng history --op``), so importing one operation
module (as a command does) does not pay for all the others at start-up."""

from __future__ import annotations

from typing import Any

from .base import Operation, get_operation, operation_names
from .modules import MODULES

__all__ = ["MODULES", "OPERATIONS", "Operation", "get_operation", "operation_names"]


def __getattr__(name: str) -> Any:
    if name == "OPERATIONS":  # the complete table, never a partly imported one
        from .base import OPERATIONS, load_all

        load_all()
        return OPERATIONS
    raise AttributeError(name)

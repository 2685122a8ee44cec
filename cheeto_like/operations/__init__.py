"""The write path. Importing this package registers every operation (for ``ng history
--op`` and ``get_operation``)."""

from . import (  # noqa: F401
    class_users,
    group,
    group_membership,
    site,
    slurm,
    storage,
    user,
    user_site,
)
from .base import OPERATIONS, Operation, get_operation, operation_names

__all__ = ["OPERATIONS", "Operation", "get_operation", "operation_names"]

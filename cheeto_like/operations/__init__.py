"""The write path. Importing this package registers every operation (for ``ng history
--op`` and ``get_operation``)."""

from . import group, group_membership, site, slurm, user, user_site  # noqa: F401
from .base import OPERATIONS, Operation, get_operation, operation_names

__all__ = ["OPERATIONS", "Operation", "get_operation", "operation_names"]

"""``cheeto ng …``: the admin commands over the source of truth."""

from ..app import group_help

group_help("ng", help="manage the source of truth (sites, users, groups, …)")

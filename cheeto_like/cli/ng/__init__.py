"""``cheeto ng …``: the admin commands over the source of truth.

Container nodes that several command modules extend are registered here, so the modules
can be imported in any order.
"""

from ..app import group_help

group_help("ng", help="manage the source of truth (sites, users, groups, …)")
group_help("ng", "site", help="sites (clusters)")

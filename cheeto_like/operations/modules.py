"""Which modules define operations: a leaf both the package and ``base.load_all`` import
(``base`` importing the package back was an import loop, issue 32). A new operations
module goes here."""

# base.load_all imports them on demand, for operation_names()/get_operation()/OPERATIONS.
MODULES = (
    "auth",
    "class_users",
    "expiry",
    "group",
    "group_membership",
    "program",
    "request",
    "site",
    "slurm",
    "storage",
    "user",
    "user_site",
)

"""The ``cheeto`` command line. ``main`` is the console-script entry point.

Nothing heavy is imported here or in ``app``: the command tree comes from the static
table in ``registry.py`` and each command's module is imported when it runs.
"""

from __future__ import annotations


def load_commands() -> None:
    """Build the whole tree and import every command module the table names (tests
    that walk the whole tree)."""
    import importlib

    from .app import expand_all
    from .registry import NODES

    expand_all()
    for module in dict.fromkeys(n.module for n in NODES if n.module is not None):
        importlib.import_module(f"{__name__}.{module}")


def main(argv: list[str] | None = None, **streams) -> int:  # type: ignore[no-untyped-def]
    from .app import main as run

    return run(argv, **streams)


def console_main() -> None:
    import sys

    sys.exit(main())

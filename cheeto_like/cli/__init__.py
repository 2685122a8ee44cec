"""The ``cheeto`` command line. ``main`` is the console-script entry point."""

from __future__ import annotations

_LOADED = False


def load_commands() -> None:
    """Import every command module once, which registers its commands on the tree."""
    global _LOADED
    if _LOADED:
        return
    # daemon_serve adds to the node cli/daemon.py creates: keep it after daemon
    from . import config, daemon, daemon_serve, db, nocloud, puppet  # noqa: F401
    from .ng import (  # noqa: F401
        alerts,
        export,
        group,
        hippo,
        history,
        iam,
        ldap,
        site,
        slurm,
        slurm_sync,
        storage,
        user,
        user_iam,
    )

    _LOADED = True


def main(argv: list[str] | None = None, **streams) -> int:  # type: ignore[no-untyped-def]
    from .app import main as run

    return run(argv, **streams)


def console_main() -> None:
    import sys

    sys.exit(main())

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
    """The ``cheeto`` script. Start-up allocates some 60k objects that live as long as
    the process (modules, classes, pydantic schemas); the collector's passes over them
    while importing cost ~25 ms, so collection is off until ``app`` has read the config
    (``app.startup_done`` freezes what exists, then turns it back on), and the exit skips
    the interpreter's teardown (~100 ms of freeing it all, issue 31)."""
    import gc

    gc.disable()
    _leave(main())


def _leave(code: int) -> None:
    """Exit with ``code`` as ``sys.exit`` would, minus the teardown: atexit handlers
    (logging's flush and close) run and the standard streams are flushed first. While
    another non-daemon thread is alive, the normal exit, which waits for it, is kept."""
    import atexit
    import os
    import sys
    import threading

    main_thread = threading.main_thread()
    if any(t is not main_thread and not t.daemon and t.is_alive()
           for t in threading.enumerate()):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing left to say
            pass
    os._exit(code)

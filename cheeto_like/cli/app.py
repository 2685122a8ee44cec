"""The command tree and the runtime every command shares.

Commands register on one ponderosa ``CmdTree`` with ``@command(*path, store=…)``. The
runtime, not each handler, loads the config, connects the store, resolves the author and
turns typed errors into one red line with exit code 2 (bad input) or 1 (failure).
Handlers are thin: parse, call one operation or query, render.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import IO, NoReturn

from ponderosa import CmdTree, SubCmd
from rich.logging import RichHandler

from .. import __version__
from ..config import Config, load_config
from ..errors import CheetoError
from ..store import Store, connect
from .output import Output

Handler = Callable[[argparse.Namespace], Awaitable[int | None] | int | None]
log = logging.getLogger("cheeto_like")


class CheetoArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _build_tree() -> CmdTree:
    root = CheetoArgumentParser(
        prog="cheeto",
        description="cheeto-like: the source of truth for HPC accounts and resources.")
    root.add_argument("--version", action="version", version=f"cheeto-like {__version__}")
    return CmdTree(root=root)


commands = _build_tree()


@dataclass
class Context:
    """What a handler gets besides its arguments (``args.ctx``)."""

    out: Output
    config: Config
    author: str | None
    store: Store | None = None
    stdin: IO[str] = field(default_factory=lambda: sys.stdin)

    def require_store(self) -> Store:
        if self.store is None:  # pragma: no cover - guarded by the command registry
            raise RuntimeError("this command was not registered with store=True")
        return self.store

    def confirm(self, question: str, *, force: bool) -> bool:
        """Ask on the terminal; without a terminal the answer is no (use ``--force``)."""
        if force:
            return True
        if not self.stdin.isatty():
            return False
        self.out.console.print(f"{question} [y/N] ", end="")
        return self.stdin.readline().strip().lower() in ("y", "yes")


def command(*path: str, help: str, store: bool = False,
            aliases: list[str] | None = None) -> Callable[[Handler], SubCmd]:
    """Register ``handler`` at ``path``; ``store=True`` connects the store first."""

    def wrap(handler: Handler) -> SubCmd:
        handler.needs_store = store  # type: ignore[attr-defined]
        return commands.register(*path, help=help, aliases=aliases,
                                 description=help)(handler)

    return wrap


async def _show_help(args: argparse.Namespace) -> int:
    args.parser_for_help.print_help(sys.stderr)
    return 2


def group_help(*path: str, help: str, aliases: list[str] | None = None) -> None:
    """Describe a container node so that ``--help`` lists it with a description.

    Idempotent and order-free: when a module registered a command below the node first
    (ponderosa then created the node bare), the existing node just gets its help.
    """
    chain = commands._find_cmd_chain(list(path))
    if all(node is not None for node in chain):
        parser = chain[-1]
        parent = chain[-2] if len(chain) > 1 else commands._root
        for action in parent._actions:
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    if choice.dest == path[-1]:
                        choice.help = help
        parser.description = help
    else:
        parser = commands.register(*path, help=help, description=help,
                                   aliases=aliases)(_show_help).parser
    parser.set_defaults(func=_show_help, parser_for_help=parser)


def _common_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("common options")
    group.add_argument("--config", metavar="PATH", default=argparse.SUPPRESS,
                       help="config file (default $CHEETO_CONFIG or "
                            "$XDG_CONFIG_HOME/cheeto/config.yaml)")
    group.add_argument("--profile", "-p", metavar="NAME", default=argparse.SUPPRESS,
                       help="config profile (default $CHEETO_PROFILE or 'default')")
    group.add_argument("--log", metavar="FILE", nargs="?", const="-", default=argparse.SUPPRESS,
                       help="write logs to FILE (bare --log: stderr)")
    group.add_argument("--log-level", default=argparse.SUPPRESS,
                       choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log level (INFO)")
    group.add_argument("--quiet", "-q", action="store_true", default=argparse.SUPPRESS,
                       help="only print errors and requested data")


def _ng_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--author", metavar="USER", default=argparse.SUPPRESS,
                        help="who History records as the author (default $USER)")


def _apply_common_args() -> None:
    """Attach the common options to every node exactly once (after all registration)."""
    for parser in commands.gather_subtree(None):
        if getattr(parser, "_cheeto_common", False):
            continue
        _common_args(parser)
        if parser.prog.split()[1:2] == ["ng"]:
            _ng_args(parser)
        parser._cheeto_common = True  # type: ignore[attr-defined]


def _setup_logging(args: argparse.Namespace, out: Output) -> None:
    level = getattr(logging, getattr(args, "log_level", "INFO"))
    target = getattr(args, "log", None)
    log.handlers.clear()
    log.propagate = False
    log.setLevel(level)
    if target is None:
        log.setLevel(logging.WARNING if level < logging.WARNING else level)
        log.addHandler(RichHandler(console=out.console, show_path=False))
    elif target == "-":
        log.addHandler(RichHandler(console=out.console, show_path=False))
    else:
        handler = logging.FileHandler(target)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        log.addHandler(handler)


async def _run_handler(args: argparse.Namespace, handler: Handler) -> int | None:
    ctx: Context = args.ctx
    if getattr(handler, "needs_store", False):
        ctx.store = await connect(ctx.config.mongo, notify=ctx.out.info)
    try:
        return await handler(args)
    finally:
        if ctx.store is not None:
            await ctx.store.close()


def main(argv: list[str] | None = None, *, stdout: IO[str] | None = None,
         stderr: IO[str] | None = None, stdin: IO[str] | None = None) -> int:
    """Entry point of the ``cheeto`` console script (and of in-process CLI tests)."""
    from . import load_commands

    load_commands()
    _apply_common_args()
    err = stderr if stderr is not None else sys.stderr
    real_stderr = sys.stderr
    try:
        sys.stderr = err  # argparse writes usage errors to sys.stderr
        args = commands._root.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    finally:
        sys.stderr = real_stderr

    fmt = "json" if getattr(args, "json", False) else "yaml" if getattr(args, "yaml", False) \
        else "human"
    out = Output(fmt, stdout=stdout, stderr=err, quiet=getattr(args, "quiet", False))
    _setup_logging(args, out)
    handler: Handler = args.func
    try:
        config = load_config(getattr(args, "config", None), getattr(args, "profile", None))
        author = getattr(args, "author", None) or os.environ.get("USER") or _login_name()
        args.ctx = Context(out=out, config=config, author=author,
                           stdin=stdin if stdin is not None else sys.stdin)
        if not asyncio.iscoroutinefunction(handler):
            return handler(args) or 0  # ponderosa's default container help
        return asyncio.run(_run_handler(args, handler)) or 0
    except CheetoError as exc:
        out.error(exc.message)
        return exc.exit_code
    except KeyboardInterrupt:
        out.error("interrupted")
        return 130
    except Exception as exc:  # a bug: say so in one line, details in the log
        log.debug("unhandled exception", exc_info=True)
        out.error(f"internal error: {type(exc).__name__}: {exc} "
                  "(rerun with --log --log-level DEBUG for a traceback)")
        return 1


def _login_name() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None


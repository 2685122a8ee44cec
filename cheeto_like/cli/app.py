"""The command tree and the runtime every command shares.

The tree's nodes come from the static table in ``cli/registry.py``; a command's module is
imported only when that command is about to run (or its own ``--help`` is asked for), so
``cheeto --help``, group help and completion start in a few tens of milliseconds instead
of paying seconds for beanie, pymongo and the models. The table's nodes are themselves
added lazily: a parser gets its children the first time it is parsed, helped or looked
up (``_expand``), so a command builds the parsers along its own path, not all ~260
(argparse asks gettext for every parser it makes: the whole tree was ~20 ms of every
start). Modules still register their handlers with ``@command(*path, store=…)``: the
decorator binds the handler (and its arguments) to the node the table created.

The runtime, not each handler, loads the config, connects the store, resolves the author
and turns typed errors into one red line with exit code 2 (bad input) or 1 (failure).
Handlers are thin: parse, call one operation or query, render.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import re
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Literal, NoReturn

from ponderosa import CmdTree, SubCmd

from .. import version as package_version
from ..errors import CheetoError
from . import registry

if TYPE_CHECKING:
    from ..config import Config
    from ..store import Store
    from .output import Output

Handler = Callable[[argparse.Namespace], Awaitable[int | None] | int | None]

# A token like -7d, -1d or -30min is a value (a negative duration), never an option.
_NEGATIVE_VALUE = re.compile(r"^-\d")
_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)$")
_UNRECOGNIZED = "unrecognized arguments: "


class CheetoArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit code 2, values that
    start with ``-<digit>`` (``--since -1d``) are values, and the common options are
    attached on first use (so nodes nobody touches cost nothing). Options are never
    abbreviated (``--acces`` is an error, not ``--access``), and an unknown command or
    option says which known ones are closest."""

    _leaf: CheetoArgumentParser | None = None  # the deepest parser of the current parse
    # The table path this parser stands for, and whether its table children were added
    # (parsers the table did not make, e.g. ``commands.register``'s, have none to add).
    _cheeto_words: tuple[str, ...] = ()
    _cheeto_expanded: bool = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        from ..text import show_controls  # argparse quotes the user's words raw

        message = _with_suggestion(message, CheetoArgumentParser._leaf or self)
        self.exit(2, f"{self.prog}: error: {show_controls(message)} (see --help)\n")

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        """``type=int`` values fit the store's 64 bits and ``type=float`` values are finite,
        so an absurd number is a usage error here, not an overflow deep inside."""
        value = super()._get_value(action, arg_string)
        if action.type is int and not -(2**63) <= value < 2**63:
            raise argparse.ArgumentError(action, f"{arg_string} is out of range")
        if action.type is float and not math.isfinite(value):
            raise argparse.ArgumentError(action, f"{arg_string} is not a finite number")
        return value

    def _parse_optional(self, arg_string: str) -> Any:
        if _NEGATIVE_VALUE.match(arg_string):
            return None
        return super()._parse_optional(arg_string)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        _expand(self)
        _ensure_common_args(self)
        CheetoArgumentParser._leaf = self  # a subcommand's parser is entered after its parent's
        return super().parse_known_args(args, namespace)

    def format_usage(self) -> str:
        _expand(self)
        _ensure_common_args(self)
        return super().format_usage()

    def format_help(self) -> str:
        _expand(self)
        _ensure_common_args(self)
        return super().format_help()


def _with_suggestion(message: str, leaf: argparse.ArgumentParser) -> str:
    """``message`` with `` (did you mean …?)`` for an unknown command or option."""
    from ..suggest import did_you_mean

    choice = _INVALID_CHOICE.search(message)
    if choice is not None:
        word, known = choice[1], re.findall(r"'([^']*)'", choice[2])
        if message.startswith("argument {"):  # the subcommands' action
            return f"unknown command {word!r}" + did_you_mean(word, known)
        return message + did_you_mean(word, known)  # an option's choices
    if message.startswith(_UNRECOGNIZED):
        options = [o for a in leaf._actions for o in a.option_strings if o.startswith("--")]
        hints = [did_you_mean(w.split("=", 1)[0], options)
                 for w in message[len(_UNRECOGNIZED):].split() if w.startswith("--")]
        hint = next((h for h in hints if h), "")
        return message + hint
    return message


class _Unloaded:
    """The handler of a table node whose module is not imported yet."""

    def __init__(self, node: registry.Node) -> None:
        self.node = node

    def __repr__(self) -> str:
        return f"<unloaded {self.node.path!r} from {self.node.module}>"


def _show_help(args: argparse.Namespace) -> int:
    """A container node without a command under it: its help, exit 2."""
    args.parser_for_help.print_help(getattr(args, "_cheeto_stderr", None) or sys.stderr)
    return 2


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def _find(words: tuple[str, ...] | list[str]) -> argparse.ArgumentParser | None:
    """The parser at ``words`` (names or aliases), or None; every parser on the way (and
    the one found) has its table children."""
    parser = commands._root
    _expand(parser)
    for word in words:
        sub = _subparsers(parser)
        if sub is None or word not in sub.choices:
            return None
        parser = sub.choices[word]
        _expand(parser)
    return parser


# The table's nodes by their parent's words, in table order.
_CHILDREN: dict[tuple[str, ...], list[registry.Node]] = {}
for _node in registry.NODES:
    _CHILDREN.setdefault(_node.words[:-1], []).append(_node)


def _expand(parser: argparse.ArgumentParser) -> None:
    """Give a table parser its table children, once."""
    if getattr(parser, "_cheeto_expanded", True):
        return
    parser._cheeto_expanded = True  # type: ignore[attr-defined]
    for node in _CHILDREN.get(getattr(parser, "_cheeto_words", ()), ()):
        _add_child(parser, node)


def expand_all() -> None:
    """Build every node of the table now (tests and tools that walk the whole tree)."""
    pending: list[argparse.ArgumentParser] = [commands._root]
    while pending:
        parser = pending.pop()
        _expand(parser)
        if (sub := _subparsers(parser)) is not None:
            pending.extend(dict.fromkeys(sub.choices.values()))  # aliases: one parser


def _add_table_node(node: registry.Node) -> None:
    parent = _find(node.words[:-1])
    if parent is None:  # pragma: no cover - registry order is checked by a test
        raise RuntimeError(f"command table: {node.path!r} comes before its parent")
    _add_child(parent, node)


def _add_child(parent: argparse.ArgumentParser, node: registry.Node) -> None:
    sub = _subparsers(parent) or parent.add_subparsers()
    child = sub.add_parser(node.words[-1], help=node.help, description=node.help,
                           aliases=list(node.aliases), add_help=node.module is None)
    child._cmd_tree = commands  # type: ignore[attr-defined]
    child._cheeto_words = node.words  # type: ignore[attr-defined]
    child._cheeto_expanded = node.words not in _CHILDREN  # type: ignore[attr-defined]
    if node.module is None:
        child.set_defaults(func=_show_help, parser_for_help=child)
    else:
        child.set_defaults(func=_Unloaded(node))
        child._cheeto_stub = True  # type: ignore[attr-defined]


class _VersionAction(argparse.Action):
    """``--version``: the version is read only when asked for (not on every start)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings=option_strings, dest=dest, default=default,
                         nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        parser._print_message(f"cheeto-like {package_version()}\n", sys.stdout)
        parser.exit()


def _build_tree() -> CmdTree:
    root = CheetoArgumentParser(
        prog="cheeto",
        description="cheeto-like: the source of truth for HPC accounts and resources. "
                    "`cheeto help` lists every command.")
    root.add_argument("--version", action=_VersionAction,
                      help="print the version and exit")
    root._cheeto_expanded = False  # type: ignore[attr-defined]
    tree = CmdTree(root=root)
    root.set_defaults(func=_show_help, parser_for_help=root)
    return tree


commands = _build_tree()

# What the modules registered (path -> (module, help, aliases)), checked against the table.
REGISTERED_COMMANDS: dict[tuple[str, ...], tuple[str, str, tuple[str, ...]]] = {}
REGISTERED_GROUPS: dict[tuple[str, ...], tuple[str, tuple[str, ...]]] = {}


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
        self.out.text(f"{question} [y/N] ", end="")  # plain text: names are not markup
        return self.stdin.readline().strip().lower() in ("y", "yes")


def _bind_leaf(parser: argparse.ArgumentParser, handler: Handler, help: str) -> None:
    """Give a table node its handler; its own ``-h`` comes back first in the options."""
    if getattr(parser, "_cheeto_stub", False):
        parser._cheeto_stub = False  # type: ignore[attr-defined]
        action = parser.add_argument("-h", "--help", action="help", default=argparse.SUPPRESS,
                                     help="show this help message and exit")
        for actions in (parser._actions, parser._optionals._group_actions):
            actions.remove(action)
            actions.insert(0, action)
    parser.description = help
    parser.set_defaults(func=handler)


def command(*path: str, help: str, store: bool | Literal["read"] = False,
            aliases: list[str] | None = None, config: bool = True,
            progress: str | None = None) -> Callable[[Handler], SubCmd]:
    """Register ``handler`` at ``path``; ``store=True`` connects the store first.

    ``store="read"`` is for a command that only reads: it connects without a writer's
    start-up work (creating every collection's indexes, migrating the names registry),
    which is two round trips per model, about 80 on each call, more than the command's
    own reads. The next writer's connect does that work. It binds only the documents
    imported by then (``Store.bind(only_loaded=True)``), so the command's module must
    import what it reads at module level (through its queries), not inside a handler.

    ``config=False`` (built-ins such as ``help``) runs a plain function without reading
    the config: it gets no ``args.ctx``, only ``args._cheeto_stdout``. ``progress`` names
    the bar drawn on a terminal while a long command runs (``ctx.out.progress``); what
    it runs reports through ``cheeto_like.progress``. The path needs a row in
    ``cli/registry.py`` (``tests/cli/test_registry.py`` checks)."""

    def wrap(handler: Handler) -> SubCmd:
        handler.needs_store = store  # type: ignore[attr-defined]
        handler.needs_config = config  # type: ignore[attr-defined]
        handler.progress_label = progress  # type: ignore[attr-defined]
        REGISTERED_COMMANDS[path] = (handler.__module__, help, tuple(aliases or ()))
        parser = _find(path)
        if parser is None:  # not in the table: the registry test names the missing row
            return commands.register(*path, help=help, aliases=aliases,
                                     description=help)(handler)
        _bind_leaf(parser, handler, help)
        return SubCmd(parser, path[-1], commands)

    return wrap


def group_help(*path: str, help: str, aliases: list[str] | None = None) -> None:
    """Describe a container node so that ``--help`` lists it with a description.

    Idempotent and order-free: the table normally created the node already, and then it
    just gets its help (the registry test checks both say the same).
    """
    REGISTERED_GROUPS[path] = (help, tuple(aliases or ()))
    _find(path)  # the table's nodes along the path, before ponderosa looks for them
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
                       help="config profile (default $CHEETO_PROFILE or 'default'); "
                            "a name the config does not define is an error")
    group.add_argument("--log", metavar="FILE", nargs="?", const="-", default=argparse.SUPPRESS,
                       help="write logs to FILE (bare --log: stderr)")
    group.add_argument("--log-level", default=argparse.SUPPRESS,
                       choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log level (INFO)")
    group.add_argument("--log-format", default=argparse.SUPPRESS, choices=["text", "json"],
                       help="log lines as text (default) or one JSON object each (with "
                            "run_id, site and task); default $CHEETO_LOG_FORMAT, else text")
    group.add_argument("--quiet", "-q", action="store_true", default=argparse.SUPPRESS,
                       help="only print errors and requested data")


def _ng_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--author", metavar="USER", default=argparse.SUPPRESS,
                        help="who History records as the author (default $USER)")


def _ensure_common_args(parser: argparse.ArgumentParser) -> None:
    if getattr(parser, "_cheeto_common", False):
        return
    parser._cheeto_common = True  # type: ignore[attr-defined]
    _common_args(parser)
    if parser.prog.split()[1:2] == ["ng"]:
        _ng_args(parser)


def _apply_common_args() -> None:
    """Attach the common options to every node now (tests that walk the whole tree)."""
    expand_all()
    for parser in commands.gather_subtree(None):
        _ensure_common_args(parser)


def _setup_logging(args: argparse.Namespace, out: Output) -> None:
    import logging

    from .. import logs
    from .output import LogHandler as RichHandler  # rich, with control characters escaped

    log = logging.getLogger("cheeto_like")
    level = getattr(logging, getattr(args, "log_level", "INFO"))
    target = getattr(args, "log", None)
    fmt = logs.resolve_format(getattr(args, "log_format", None))
    log.handlers.clear()
    log.propagate = False
    log.setLevel(level)
    if target is None:
        log.setLevel(logging.WARNING if level < logging.WARNING else level)
    if target is not None and target != "-":
        handler: logging.Handler = logging.FileHandler(target)
        logs.prepare(handler, fmt, "%(asctime)s %(levelname)s %(name)s: %(message)s")
    elif fmt == "json":  # a log shipper reads stderr: no colours, one object a line
        handler = logs.prepare(logging.StreamHandler(out.stderr), fmt)
    else:
        handler = RichHandler(console=out.console, show_path=False)
    log.addHandler(handler)


async def _run_handler(args: argparse.Namespace, handler: Handler) -> int | None:
    from ..store import connect

    ctx: Context = args.ctx
    if needs := getattr(handler, "needs_store", False):
        refuse_client_only(ctx.config)
        ctx.store = await connect(ctx.config.mongo, notify=ctx.out.info,
                                  create_indexes=needs != "read", only_loaded=needs == "read")
        await _canonical_sites(args)
    label = getattr(handler, "progress_label", None)
    try:
        if label is None:
            return await handler(args)  # type: ignore[misc]
        with ctx.out.progress(label):
            return await handler(args)  # type: ignore[misc]
    finally:
        if ctx.store is not None:
            await ctx.store.close()


def refuse_client_only(config: Config) -> None:
    """A store command under a client's config (a ``client`` section, no ``mongo``) is
    one line, never a local embedded store started and answered from."""
    if config.client_only and config.client is not None:
        from ..errors import ConfigError

        raise ConfigError(
            f"{config.path} is a client's config (a `client` section, no `mongo`): "
            f"this command needs the store, so run it where the store is (or give it "
            f"--config with a mongo section); here, `cheeto login|me|usage|quota` "
            f"ask the API at {config.client.url}")


async def _canonical_sites(args: argparse.Namespace) -> None:
    """Every ``-s`` as the site's name: an alias or fqdn, in any case, works everywhere
    the API takes it (``-s caesfarm``, ``-s FARM``). A value no site matches is left as
    given (the command says it does not exist, or ``ng site new`` creates it)."""
    from ..queries.site import resolve_site_name

    value = getattr(args, "site", None)
    if isinstance(value, str) and value:
        args.site = await resolve_site_name(value)
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        args.site = [await resolve_site_name(v) for v in value]


def load_module_of(node: registry.Node) -> None:
    """Import the module that implements ``node``; it binds the node's handler."""
    assert node.module is not None
    importlib.import_module(f"{__package__}.{node.module}")
    parser = _find(node.words)
    if parser is None or isinstance(parser._defaults.get("func"), _Unloaded):
        raise RuntimeError(f"command table: cheeto_like.cli.{node.module} does not register "
                           f"{node.path!r}")


def parser_of(node: registry.Node) -> argparse.ArgumentParser:
    """A table node's parser, its module imported: what completion reads options from
    (handed to ``complete``, which does not import this module)."""
    load_module_of(node)
    parser = _find(node.words)
    assert parser is not None
    return parser


def _parse(argv: list[str] | None) -> argparse.Namespace:
    """Parse in two passes: the first (over the table's nodes) finds the command, whose
    module is then imported so the second pass knows its arguments."""
    first, _ = commands._root.parse_known_args(argv)
    stub = getattr(first, "func", None)
    if isinstance(stub, _Unloaded):
        load_module_of(stub.node)
    return commands._root.parse_args(argv)


def main(argv: list[str] | None = None, *, stdout: IO[str] | None = None,
         stderr: IO[str] | None = None, stdin: IO[str] | None = None) -> int:
    """Entry point of the ``cheeto`` console script (and of in-process CLI tests)."""
    err = stderr if stderr is not None else sys.stderr
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["__complete"]:  # hidden: what the completion scripts call
        from .complete import complete

        return complete(words[1:], stdout if stdout is not None else sys.stdout, parser_of)
    real_stdout, real_stderr = sys.stdout, sys.stderr
    try:
        sys.stderr = err  # argparse writes usage errors to sys.stderr
        if stdout is not None:
            sys.stdout = stdout  # and --help/--version to sys.stdout
        args = _parse(words)
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    except Exception as exc:  # a command module that fails to import: a bug, one line
        err.write(f"error: internal error: {type(exc).__name__}: {exc}\n")
        return 1
    finally:
        sys.stdout, sys.stderr = real_stdout, real_stderr

    handler: Handler = args.func
    args._cheeto_stdout = stdout if stdout is not None else sys.stdout
    args._cheeto_stderr = err
    if not getattr(handler, "needs_config", False):  # group help, built-ins
        return handler(args) or 0  # type: ignore[return-value]
    return _run(args, handler, stdout=stdout, stderr=err, stdin=stdin)


def startup_done() -> None:
    """Turn garbage collection back on if the console script turned it off for the
    start-up (``console_main``), first freezing what start-up made (modules, classes,
    schemas: they live as long as the process), so no later pass scans it again. Long
    commands (daemons, syncs) then collect as usual. In-process callers (tests) never
    turned it off, and nothing is frozen for them."""
    import gc

    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def _run(args: argparse.Namespace, handler: Handler, *, stdout: IO[str] | None,
         stderr: IO[str], stdin: IO[str] | None) -> int:
    import asyncio

    from ..config import load_config
    from .output import Output

    fmt = "json" if getattr(args, "json", False) else "yaml" if getattr(args, "yaml", False) \
        else "human"
    out = Output(fmt, stdout=stdout, stderr=stderr, quiet=getattr(args, "quiet", False))
    _setup_logging(args, out)
    try:
        config = load_config(getattr(args, "config", None), getattr(args, "profile", None))
        startup_done()
        author = getattr(args, "author", None) or os.environ.get("USER") or _login_name()
        args.ctx = Context(out=out, config=config, author=author,
                           stdin=stdin if stdin is not None else sys.stdin)
        if not asyncio.iscoroutinefunction(handler):
            return handler(args) or 0  # type: ignore[return-value]
        return asyncio.run(_run_handler(args, handler)) or 0
    except CheetoError as exc:
        out.error(exc.message)
        return exc.exit_code
    except KeyboardInterrupt:
        out.error("interrupted")
        return 130
    except OSError as exc:
        if (line := storage_problem(exc, _data_dir(args))) is None:
            return _internal_error(out, exc)
        out.error(line)
        return 1
    except Exception as exc:  # a bug: say so in one line, details in the log
        from pydantic import ValidationError

        if isinstance(exc, ValidationError):  # a model refused a value: bad input, one line
            from ..validation import describe_validation_error

            out.error(describe_validation_error(exc))
            return 2
        return _internal_error(out, exc)


def _internal_error(out: Output, exc: BaseException) -> int:
    import logging

    logging.getLogger("cheeto_like").debug("unhandled exception", exc_info=True)
    first = (str(exc).strip().splitlines() or [""])[0]
    out.error(f"internal error: {type(exc).__name__}: {first} "
              "(rerun with --log --log-level DEBUG for a traceback)")
    return 1


_STORAGE_ERRNOS = {"EROFS": "is on a read-only file system",
                   "ENOSPC": "is on a full disk (no space left on the device)",
                   "EDQUOT": "is on a disk whose quota is used up"}


def _data_dir(args: argparse.Namespace) -> str | None:
    """The embedded store's data directory of the config in use, if any."""
    ctx = getattr(args, "ctx", None)
    mongo = getattr(getattr(ctx, "config", None), "mongo", None)
    if mongo is None or not mongo.is_embedded:
        return None
    return str(mongo.embedded.path)


def storage_problem(exc: OSError, data_dir: str | None = None) -> str | None:
    """A write refused by the file system (read-only, full, over quota) in one line,
    naming the file (else the store's data directory); None for any other error."""
    import errno

    for name, words in _STORAGE_ERRNOS.items():
        if exc.errno == getattr(errno, name, None):
            where = str(exc.filename) if exc.filename else \
                f"the store's data directory {data_dir}" if data_dir else \
                "a file this command writes"
            return (f"cannot write {where}: it {words}; free space or make its directory "
                    f"writable (the embedded store needs to write its data directory), "
                    f"then run the command again (`cheeto db check` reads a store as it is)")
    return None


def _login_name() -> str | None:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None

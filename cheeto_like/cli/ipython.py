"""``cheeto ipython``: an interactive Python shell with the store open and the models
imported, where ``await`` works at the top level (``await User.find_one(...)``).

The store's client lives on the command's event loop; the shell runs in a thread of its
own and hands every top-level ``await`` to that loop (the design of ``python -m
asyncio``). IPython is used when it is installed and the shell is on a terminal (its
``loop_runner`` is pointed at the same loop); otherwise the standard library's
``code.InteractiveConsole`` does the job, reading standard input, so the command also
runs a piped script.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import code
import contextlib
import importlib.util
import inspect
import types
from typing import IO, Any

from . import args as a
from .app import command

BANNER = ("cheeto shell: store (database {database}), config, author and the models "
          "({models}) are loaded; top-level await works. Ctrl-D leaves.")


def namespace(ctx: Any) -> dict[str, Any]:
    from .. import models, operations, queries

    names: dict[str, Any] = {model.__name__: model for model in models.ALL_MODELS}
    names.update(store=ctx.store, config=ctx.config, author=ctx.author, models=models,
                 operations=operations, queries=queries)
    return names


class AsyncConsole(code.InteractiveConsole):
    """A console whose top-level awaits run on ``loop`` (another thread's), reading from
    ``stdin`` and printing to ``stdout``/``stderr`` rather than the process's streams."""

    def __init__(self, local: dict[str, Any], loop: asyncio.AbstractEventLoop,
                 stdin: IO[str], stdout: IO[str], stderr: IO[str]) -> None:
        super().__init__(local)
        self.compile.compiler.flags |= ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        self.loop, self.stdin, self.stdout, self.stderr = loop, stdin, stdout, stderr

    def raw_input(self, prompt: str = "") -> str:
        if self.stdin.isatty():
            self.stdout.write(prompt)
            self.stdout.flush()
        line = self.stdin.readline()
        if not line:
            raise EOFError
        return line.rstrip("\n")

    def write(self, data: str) -> None:
        self.stderr.write(data)

    def runcode(self, code_obj: types.CodeType) -> None:
        with contextlib.redirect_stdout(self.stdout):
            try:
                result = types.FunctionType(code_obj, self.locals)()  # type: ignore[arg-type]
                if inspect.iscoroutine(result):
                    asyncio.run_coroutine_threadsafe(result, self.loop).result()
            except SystemExit:
                raise
            except BaseException:
                self.showtraceback()


def _ipython(ns: dict[str, Any], loop: asyncio.AbstractEventLoop, banner: str) -> None:
    from IPython import start_ipython  # type: ignore[import-not-found]
    from traitlets.config import Config  # type: ignore[import-not-found]

    cfg = Config()
    cfg.InteractiveShell.autoawait = True
    cfg.InteractiveShell.loop_runner = (
        lambda coro: asyncio.run_coroutine_threadsafe(coro, loop).result())
    cfg.TerminalInteractiveShell.banner2 = banner
    start_ipython(argv=[], user_ns=ns, config=cfg)


@command("ipython", help="an interactive Python shell with the store open and the models "
                         "imported", store=True)
async def ipython(args: argparse.Namespace) -> int:
    ctx = args.ctx
    ns = namespace(ctx)
    from .. import models

    banner = BANNER.format(database=ctx.store.database.name,
                           models=", ".join(m.__name__ for m in models.ALL_MODELS[:4]) + ", …")
    loop = asyncio.get_running_loop()
    stdout = args._cheeto_stdout
    stderr = args._cheeto_stderr
    use_ipython = (not args.plain and ctx.stdin.isatty()
                   and importlib.util.find_spec("IPython") is not None)
    if use_ipython:
        await asyncio.to_thread(_ipython, ns, loop, banner)
        return 0
    console = AsyncConsole(ns, loop, ctx.stdin, stdout, stderr)
    quiet = not ctx.stdin.isatty()
    await asyncio.to_thread(console.interact, banner="" if quiet else banner,
                            exitmsg="")
    return 0


@ipython.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--plain", action="store_true",
                        help="use the standard library's console even if IPython is installed")

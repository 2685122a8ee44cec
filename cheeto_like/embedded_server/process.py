"""The server process: data directory, token, lock, arguments, and ``main`` (what ``python
-m cheeto_like.embedded`` runs).

Part of the embedded store's server (the package docstring says why it exists).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import logging
import os
import secrets
import signal
import sys
import threading
from pathlib import Path

from .. import store_files
from ..embedded_common import (
    ALREADY_SERVED_EXIT,
    SOCKET_NAME,
    TOKEN_ENV,
    TOKEN_NAME,
    ensure_instance_id,
    write_private,
)
from ..processes import process_gone
from .protocol import EXIT_GRACE_S, EXIT_WITH_POLL_S
from .server import StoreServer

logger = logging.getLogger("cheeto_like.embedded_server")


# -- the process --------------------------------------------------------------------------


def secure_data_dir(data_dir: Path) -> None:
    """0700 for the directory and 0600 for the files in it (older stores were 0755/0644)."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(data_dir, 0o700)
    for entry in data_dir.iterdir():
        if entry.is_file() and not entry.is_symlink():
            os.chmod(entry, 0o600)


def resolve_token(data_dir: Path, token_file: str | None) -> str:
    """The TCP credential: ``$CHEETO_STORE_TOKEN``, else the token file, generated (0600)
    when missing. Never from argv."""
    if env := os.environ.get(TOKEN_ENV):
        return env
    path = Path(token_file) if token_file else data_dir / TOKEN_NAME
    try:
        token = path.read_text().strip()
    except FileNotFoundError:
        token = ""
    if not token:
        token = secrets.token_urlsafe(32)
        write_private(path, token + "\n")
    return token


def hold_server_lock(data_dir: Path) -> int:
    """One server per data directory, whatever the transport or port."""
    fd = os.open(data_dir / "server.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        print(f"error: another embedded store already serves {data_dir}", file=sys.stderr)
        sys.exit(ALREADY_SERVED_EXIT)
    return fd


def parse_parameters(items: list[str]) -> dict[str, str]:
    """``NAME=VALUE`` pairs (``--set-parameter``); ValueError for one without ``=``."""
    parameters: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"expected NAME=VALUE, got {item!r}")
        parameters[key] = value
    return parameters


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="cheeto_like.embedded")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--listen", choices=("unix", "tcp"), default="unix")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=27117)
    parser.add_argument("--lock-timeout", type=float, default=60.0)
    parser.add_argument("--token-file")
    parser.add_argument("--log-file")
    parser.add_argument("--pid-file")
    parser.add_argument("--set-parameter", "--setParameter", action="append", default=[],
                        metavar="NAME=VALUE", dest="set_parameter",
                        help="a mongod parameter at start-up (enableTestCommands=1, "
                             "transactionLifetimeLimitSeconds=N)")
    parser.add_argument("--exit-with", type=int, metavar="PID",
                        help="stop when this process ends (a test session's throwaway store)")
    return parser.parse_args(argv)


async def _watch(pid: int, stop: asyncio.Event, every: float = EXIT_WITH_POLL_S) -> None:
    """Set ``stop`` once ``pid`` has ended (``--exit-with``)."""
    while not stop.is_set():
        if process_gone(pid):
            logger.warning("process %d has ended: stopping (--exit-with)", pid)
            stop.set()
            return
        await asyncio.sleep(every)


async def _serve(server: StoreServer, args: argparse.Namespace, data_dir: Path) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    watcher = asyncio.create_task(_watch(args.exit_with, stop)) \
        if args.exit_with is not None else None
    reaper = asyncio.create_task(server.gate.reap())
    if args.listen == "unix":
        path = data_dir / SOCKET_NAME
        path.unlink(missing_ok=True)  # a stale socket; the server lock says none is live
        listener = await asyncio.start_unix_server(server.serve_connection, path=str(path))
        os.chmod(path, 0o600)
    else:
        listener = await asyncio.start_server(server.serve_connection, args.host, args.port)
    logger.warning("serving %s on %s", data_dir,
                   f"unix:{data_dir / SOCKET_NAME}" if args.listen == "unix"
                   else f"tcp:{args.host}:{args.port}")
    async with listener:
        await stop.wait()
        # Leave cleanly but never hang (a busy shutdown once ignored SIGTERM): after a
        # grace period the process exits regardless. SQLite keeps every committed
        # transaction, and nothing uncommitted was promised to a client.
        timer = threading.Timer(EXIT_GRACE_S, os._exit, args=(0,))
        timer.daemon = True
        timer.start()
        listener.close()
        reaper.cancel()
        if watcher is not None:
            watcher.cancel()
        if server.gate.owner is not None:
            await server.gate.abort_owner("the server is stopping")


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    os.umask(0o077)
    data_dir = Path(os.path.realpath(args.data_dir))
    secure_data_dir(data_dir)
    lock_fd = hold_server_lock(data_dir)
    store_files.refuse_damaged(data_dir)  # a recorded file missing or damaged: exit 1
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s [%(process)d] %(message)s")
    for name in ("nx_27017", "neosqlite"):
        logging.getLogger(name).setLevel(logging.WARNING)
    from nx_27017.handler import NeoSQLiteHandler

    token = resolve_token(data_dir, args.token_file) if args.listen == "tcp" else None
    instance_id = ensure_instance_id(data_dir)
    handler = NeoSQLiteHandler(str(data_dir), data_dir=str(data_dir), journal_mode="WAL")
    try:
        server = StoreServer(handler, data_dir=data_dir, instance_id=instance_id,
                             transport=args.listen, token=token,
                             lock_timeout=args.lock_timeout,
                             parameters=parse_parameters(args.set_parameter))
    except ValueError as exc:
        handler.close_all()
        print(f"error: --set-parameter: {exc}", file=sys.stderr)
        sys.exit(2)
    pid_file = Path(args.pid_file) if args.pid_file else None
    if pid_file is not None:
        write_private(pid_file, f"{os.getpid()}\n")
    try:
        asyncio.run(_serve(server, args, data_dir))
    finally:
        with contextlib.suppress(Exception):
            handler.close_all()
        if args.listen == "unix":
            (data_dir / SOCKET_NAME).unlink(missing_ok=True)
        if pid_file is not None:
            pid_file.unlink(missing_ok=True)
        os.close(lock_fd)

"""Progress bars: drawn on stderr when it is a terminal (a real pty here), silent
otherwise, and fed by deep code through ``cheeto_like.progress`` (also from threads)."""

from __future__ import annotations

import asyncio
import fcntl
import io
import os
import struct
import termios
from collections.abc import Iterator

import pytest

from cheeto_like import progress
from cheeto_like.cli import main
from cheeto_like.cli.output import Output

from ..factories import home_defaults


def work(step) -> None:  # type: ignore[no-untyped-def]
    """What a command does: report through the callback and the module."""
    step()
    progress.begin(4, "hashing passwords")
    for _ in range(4):
        progress.advance()


@pytest.fixture
def pty_stderr() -> Iterator[tuple[io.TextIOWrapper, int]]:
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    stream = os.fdopen(slave, "w", encoding="utf-8")
    try:
        yield stream, master
    finally:
        stream.close()
        os.close(master)


def drain(master: int) -> str:
    os.set_blocking(master, False)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except (BlockingIOError, OSError):
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def test_silent_when_stderr_is_not_a_terminal():
    err = io.StringIO()
    out = Output(stderr=err)
    with out.progress("class accounts", total=5) as step:
        work(step)
    assert err.getvalue() == ""


def test_draws_on_a_terminal(pty_stderr):
    stream, master = pty_stderr
    out = Output(stderr=stream)
    with out.progress("class accounts") as step:
        work(step)
    stream.flush()
    drawn = drain(master)
    assert "hashing passwords" in drawn and "4/4" in drawn
    assert "\x1b[" in drawn  # cursor control: a live bar, not plain lines


def test_quiet_is_silent_even_on_a_terminal(pty_stderr):
    stream, master = pty_stderr
    out = Output(stderr=stream, quiet=True)
    with out.progress("class accounts") as step:
        work(step)
    stream.flush()
    assert drain(master) == ""


async def test_reports_from_worker_threads(pty_stderr):
    stream, master = pty_stderr
    out = Output(stderr=stream)
    with out.progress("IAM sync", total=3):
        for _ in range(3):
            await asyncio.to_thread(progress.advance)
    stream.flush()
    assert "3/3" in drain(master)


def test_without_a_reporter_reporting_is_a_no_op():
    progress.begin(10, "nobody listens")
    progress.advance(3)  # nothing raised, nothing printed


async def test_a_class_batch_draws_its_progress_on_a_terminal(cli, cli_config, db, store,
                                                             pty_stderr):
    r = await cli("ng", "site", "new", "-s", "farm", "--fqdn", "farm.example.org")
    assert r.code == 0, r.stderr
    await home_defaults(store)
    stream, master = pty_stderr
    out = io.StringIO()
    code = await asyncio.to_thread(
        main, ["ng", "user", "new", "class", "-s", "farm", "--prefix", "cs1", "--count", "3",
               "--expires-at", "+30d", "--config", str(cli_config)],
        stdout=out, stderr=stream, stdin=io.StringIO())
    await store.bind(create_indexes=False)
    stream.flush()
    drawn = drain(master)
    assert code == 0, drawn
    # hashing, then the chunks: each account created, then activated (2 units each)
    assert "class accounts" in drawn and "6/6" in drawn
    assert len(out.getvalue().splitlines()) == 3  # the passwords, on stdout only

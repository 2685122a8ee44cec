"""Run one outside program with a timeout and get back what happened, never a half-state.

The sacctmgr and git adapters share this: every call has a timeout; a call that
overruns, or whose caller is cancelled (a Celery soft time limit), is killed with its
whole process group, because ``sudo sacctmgr`` and ``git push`` (receive-pack, hooks)
leave children that would otherwise keep running and hold the pipes open; and the
result keeps the exit code, both outputs (what was printed before a kill too) and the
duration for the run's report. Programs run through ``sh`` (DESIGN §1).
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass

import sh

from ..errors import ExternalError

KILL_GRACE_S = 5.0  # how long to wait for a killed process group's pipes to close


@dataclass(frozen=True)
class ProcessResult:
    argv: tuple[str, ...]
    returncode: int | None  # None: killed at the timeout
    stdout: str
    stderr: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    def summary(self) -> str:
        """One line for a report: the exit code and the first lines of what it said."""
        if self.timed_out:
            text = self.stderr.strip()
            tail = f": {text.splitlines()[-1].strip()}" if text else ""
            return f"timed out after {self.seconds:.1f}s and was killed{tail}"
        lines = [ln.strip() for ln in (self.stderr.strip() or self.stdout.strip()).splitlines()]
        detail = " / ".join(ln for ln in lines[:4] if ln)
        return f"exit {self.returncode}" + (f": {detail}" if detail else "")


async def run_process(argv: Sequence[str], *, time_limit: float, env: Mapping[str, str],
                      missing: str) -> tuple[int | None, str, str, float]:
    """(exit code or None past ``time_limit``, stdout, stderr, seconds). Raises
    ``ExternalError(missing)`` when the program is not installed (looked up on ``env``'s
    ``PATH``); a failing program is not an exception here, the caller decides what its
    result means.

    The program runs through ``sh`` (DESIGN §1) in its async mode, in a new session (its
    own process group) with an empty stdin and pipes (not a tty) for its output; ``sh``
    collects the output in its own threads, so whatever was printed before a kill is kept.
    Two things are ours rather than ``sh``'s:

    - the time limit: ``sh``'s ``_timeout`` signals only the program itself; at the limit,
      or when the caller is cancelled, we SIGKILL the whole group, so ``sudo sacctmgr``
      or ``git push``'s hooks cannot outlive it (and when the program ends, whatever it
      left in its group is killed too: no call leaves anything running);
    - the wait: ``await running`` resolves when ``sh``'s output thread finishes, and that
      thread polls for the program's exit once a second after its pipes close, which
      made about one run in twenty of a 5 ms program take 1.01 s (and fail a 0.5 s time
      limit). ``RunningCommand.wait()`` reaps the program with a blocking ``waitpid`` and
      then releases the output thread at once, so it runs in a thread of its own (not the
      loop's default executor, which a few slow programs would fill).
    """
    started = time.monotonic()
    try:
        program = sh.Command(argv[0], search_paths=os.get_exec_path(dict(env)))
    except sh.CommandNotFound:
        raise ExternalError(missing) from None
    try:
        running = program(*argv[1:], _async=True, _return_cmd=True, _new_session=True,
                          _in="", _tty_out=False, _env=dict(env), _ok_code=_ANY_EXIT,
                          _truncate_exc=False)
    except OSError as exc:
        raise ExternalError(f"cannot run {argv[0]}: {exc.strerror}") from None
    finished = _wait_in_thread(running)
    try:
        done, _ = await asyncio.wait({finished}, timeout=time_limit)
        timed_out = not done
        if timed_out:
            await _kill(running, finished)
        else:
            finished.result()
            _kill_group(running)  # whatever it left behind in its group goes too
    except BaseException:  # cancelled: do not leave the program (or its children) running
        await _kill(running, finished)
        raise
    process = running.process
    code = None if timed_out else process.exit_code
    return (code, process.stdout.decode(errors="replace"),
            process.stderr.decode(errors="replace"), time.monotonic() - started)


_ANY_EXIT = list(range(256))  # every exit status is a result; the caller judges it


def _wait_in_thread(running: sh.RunningCommand) -> asyncio.Future[None]:
    """A future that resolves once the program has exited and its output is read."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def resolve(error: BaseException | None) -> None:
        if future.done():
            return
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)

    def wait() -> None:
        error: BaseException | None = None
        try:
            running.wait()
        except sh.ErrorReturnCode:  # killed by a signal: a result, not an error
            pass
        except BaseException as exc:  # pragma: no cover - sh's own failure
            error = exc
        with suppress(RuntimeError):  # the loop is gone: nobody is waiting any more
            loop.call_soon_threadsafe(resolve, error)

    threading.Thread(target=wait, name=f"wait for {running.process.pid}", daemon=True).start()
    return future


def _kill_group(running: sh.RunningCommand) -> None:
    """SIGKILL the program's process group. Its id is the program's pid (a new session),
    and stays valid after the program is reaped while any member lives (Linux does not
    reuse a pid that is a live group's id), so leftovers are found even then; sh's
    ``kill_group()`` asks ``getpgid(pid)``, which fails once the leader is gone."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(running.process.pid, signal.SIGKILL)


async def _kill(running: sh.RunningCommand, finished: asyncio.Future[None]) -> None:
    _kill_group(running)
    with suppress(TimeoutError):  # pragma: no cover - something outside holds a pipe
        await asyncio.wait_for(asyncio.shield(finished), KILL_GRACE_S)

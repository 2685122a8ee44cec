"""Run one outside program with a timeout and get back what happened, never a half-state.

The sacctmgr and git adapters share this: every call has a timeout; a call that
overruns, or whose caller is cancelled (a Celery soft time limit), is killed with its
whole process group, because ``sudo sacctmgr`` and ``git push`` (receive-pack, hooks)
leave children that would otherwise keep running and hold the pipes open; and the
result keeps the exit code, both outputs and the duration for the run's report.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass

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
    """(exit code or None past ``time_limit``, stdout, stderr, seconds). Not
    ``asyncio.timeout`` around the call: the overrun must kill the process group. Raises
    ``ExternalError(missing)`` when the program is not installed; a failing program is
    not an exception here, the caller decides what its result means."""
    started = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=dict(env), start_new_session=True)
    except FileNotFoundError:
        raise ExternalError(missing) from None
    except OSError as exc:
        raise ExternalError(f"cannot run {argv[0]}: {exc.strerror}") from None
    try:
        out, err = await asyncio.wait_for(proc.communicate(), time_limit)
        code: int | None = proc.returncode
    except TimeoutError:
        out, err = await _kill(proc)
        code = None
    except BaseException:  # cancelled: do not leave the program (or its children) running
        await _kill(proc)
        raise
    return (code, out.decode(errors="replace"), err.decode(errors="replace"),
            time.monotonic() - started)


async def _kill(proc: asyncio.subprocess.Process) -> tuple[bytes, bytes]:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        return await asyncio.wait_for(proc.communicate(), KILL_GRACE_S)
    except TimeoutError:  # pragma: no cover - something outside the group holds a pipe
        return b"", b""

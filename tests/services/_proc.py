"""Process, port and readiness helpers shared by the service harnesses.

Stdlib only, so the harness works before the project's own dependencies are installed.
The helpers exist because the daemons we start are throwaway: we kill them hard, and on
this machine PID 1 reaps orphans slowly, so "is it gone?" must ignore zombies.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

__all__ = [
    "ServiceError",
    "StepTimer",
    "alive",
    "ensure_running",
    "free_port",
    "free_ports",
    "is_port_clash",
    "kill_and_wait",
    "kill_group",
    "kill_procs",
    "log_tails",
    "port_open",
    "retry_port_clash",
    "run",
    "spawn",
    "tail",
    "wait_for",
]

LOOPBACK = "127.0.0.1"
_PR_SET_PDEATHSIG = 1
# Loaded once here: dlopen() in a freshly forked child is best avoided.
_LIBC = ctypes.CDLL(None, use_errno=True)


class ServiceError(RuntimeError):
    """A test service could not be started, reached or stopped.

    Raised instead of skipping: a broken service must fail the session loudly, and the
    message carries the tails of the relevant logs so CI output alone explains why.
    """


class StepTimer:
    """Records seconds since construction at named steps, to report bring-up cost."""

    def __init__(self) -> None:
        self._t0 = time.monotonic()
        self.steps: dict[str, float] = {}

    def mark(self, step: str) -> float:
        """Record (and return) the elapsed seconds at `step`."""
        elapsed = round(time.monotonic() - self._t0, 3)
        self.steps[step] = elapsed
        return elapsed

    @property
    def elapsed(self) -> float:
        """Seconds since the timer started."""
        return round(time.monotonic() - self._t0, 3)


# ---------------------------------------------------------------- ports


def free_port(host: str = LOOPBACK) -> int:
    """Return a TCP port that is free on `host` right now (the kernel picks it)."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """Return `count` distinct free ports.

    All sockets stay bound until every port is chosen; calling free_port() in a loop
    could hand out the same port twice.
    """
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(sock.getsockname()[1])
        return ports


_CLASH_MARKERS = ("address already in use", "eaddrinuse", "errno=98", "port_already_used")


def is_port_clash(error: BaseException) -> bool:
    """True if a start-up failure looks like another process grabbed one of our ports.

    free_ports() only proves a port was free a moment ago; callers retry with fresh
    ports when this returns True.
    """
    text = str(error).lower()
    return any(marker in text for marker in _CLASH_MARKERS)


def retry_port_clash[T](start_once: Callable[[], T], attempts: int = 3) -> T:
    """Call `start_once` again (it picks fresh ports) while failures are port clashes."""
    for _ in range(attempts - 1):
        try:
            return start_once()
        except ServiceError as exc:
            if not is_port_clash(exc):
                raise
    return start_once()


def port_open(port: int, host: str = LOOPBACK, timeout: float = 0.2) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


# ---------------------------------------------------------------- logs


def tail(path: Path, lines: int = 40) -> str:
    """Last `lines` lines of a log file, or a note saying why there are none."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        return f"<{exc.strerror or exc}>"
    return "\n".join(text.splitlines()[-lines:]) or "<empty>"


def log_tails(paths: Iterable[Path], lines: int = 40) -> str:
    """Tails of several logs, each under a header naming the file."""
    return "\n".join(f"--- {p} (last {lines} lines) ---\n{tail(p, lines)}" for p in paths)


def _fail(message: str, logs: Sequence[Path]) -> ServiceError:
    return ServiceError(f"{message}\n{log_tails(logs)}" if logs else message)


# ---------------------------------------------------------------- processes


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name, or None if the pid is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def _reap(pid: int) -> None:
    """Collect `pid` if it is our own exited child, so it doesn't linger as a zombie."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def alive(pid: int) -> bool:
    """True if `pid` runs and is not a zombie.

    PID 1 here reaps orphans only every 1-2 s, so a killed daemon can sit in state Z
    while `kill -0` still succeeds; treating Z as dead keeps teardown fast.
    """
    _reap(pid)
    fields = _proc_stat(pid)
    return fields is not None and fields[0] != "Z"


def _group_members(pgid: int) -> list[int]:
    """Live pids whose process group is `pgid` (field 3 after the name in /proc/pid/stat)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _proc_stat(int(entry.name))
        if fields and fields[0] != "Z" and fields[2] == str(pgid):
            members.append(int(entry.name))
    return members


def _wait_dead(pids: Iterable[int], timeout: float) -> list[int]:
    """Wait until none of `pids` is alive; return those still alive at the deadline."""
    pending = list(pids)
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        pending = [p for p in pending if alive(p)]
        if pending:
            time.sleep(0.02)
    return pending


def kill_and_wait(pids: Iterable[int], sig: int = signal.SIGKILL, timeout: float = 10.0) -> None:
    """Send `sig` to each pid and wait until all are dead (zombies count as dead)."""
    targets = [p for p in pids if p and p > 0]
    for pid in targets:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    left = _wait_dead(targets, timeout)
    if left:
        raise ServiceError(f"processes {left} still alive {timeout}s after signal {sig}")


def kill_group(pgid: int, sig: int = signal.SIGKILL, timeout: float = 10.0) -> None:
    """Signal a whole process group (a daemon plus its helpers) and wait for all of it."""
    members = _group_members(pgid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    left = _wait_dead(members, timeout)
    if left:
        raise ServiceError(f"group {pgid}: {left} still alive {timeout}s after signal {sig}")


def kill_procs(procs: Iterable[subprocess.Popen[bytes]]) -> None:
    """SIGKILL each daemon's process group and reap it; report failures after trying all."""
    problems = []
    for proc in procs:
        try:
            kill_group(proc.pid, signal.SIGKILL)
        except ServiceError as exc:
            problems.append(str(exc))
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
    if problems:
        raise ServiceError("; ".join(problems))


def _die_with_parent() -> None:
    """preexec_fn: SIGKILL the child when the starting thread dies.

    If pytest itself is killed (CI timeout, kill -9), no teardown runs; this keeps
    the direct children from outliving it. Best effort: a failure here is ignored.
    """
    with contextlib.suppress(Exception):
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def spawn(
    argv: Sequence[str],
    *,
    log: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start a long-running daemon in its own session with stdout+stderr to `log`.

    Its own session (process group) lets stop() kill the daemon and any helper it forks
    with one killpg, and keeps a Ctrl-C in the terminal from killing it mid-teardown.
    """
    # PDEATHSIG fires when the *thread* that forked exits, so only use it from the main thread.
    preexec = _die_with_parent if threading.current_thread() is threading.main_thread() else None
    with open(log, "ab") as out:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=preexec,
        )


def ensure_running(proc: subprocess.Popen[bytes], what: str, logs: Sequence[Path]) -> None:
    """Raise ServiceError at once if a daemon we started has already exited."""
    code = proc.poll()
    if code is not None:
        raise _fail(f"{what} exited with status {code} during start-up", logs)


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    timeout: float = 30.0,
    check: bool = True,
    logs: Sequence[Path] = (),
) -> subprocess.CompletedProcess[str]:
    """Run a short command; with `check`, turn failure into a ServiceError with its output."""
    cmd = " ".join(argv)
    try:
        result = subprocess.run(
            list(argv),
            env=dict(env) if env is not None else None,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        raise _fail(f"`{cmd}` timed out after {timeout}s", logs) from exc
    except FileNotFoundError as exc:
        raise ServiceError(
            f"`{argv[0]}` not found: run scripts/install-system-deps.sh first"
        ) from exc
    if check and result.returncode != 0:
        message = (
            f"`{cmd}` failed with status {result.returncode}\n"
            f"stdout: {result.stdout.strip()}\nstderr: {result.stderr.strip()}"
        )
        raise _fail(message, logs)
    return result


# ---------------------------------------------------------------- readiness


def wait_for(
    predicate: Callable[[], bool],
    timeout: float,
    what: str,
    *,
    logs: Sequence[Path] = (),
    interval: float = 0.05,
    detail: Callable[[], str] | None = None,
) -> float:
    """Poll `predicate` until it is true; return the seconds waited.

    Raises ServiceError naming `what` with the log tails after `timeout` seconds; the
    optional `detail()` adds context such as the last client error. A ServiceError
    raised by the predicate itself (e.g. "daemon exited") aborts at once.
    """
    start = time.monotonic()
    deadline = start + timeout
    while True:
        if predicate():
            return round(time.monotonic() - start, 3)
        if time.monotonic() >= deadline:
            extra = f"\n{detail()}" if detail else ""
            raise _fail(f"timed out after {timeout}s waiting for {what}{extra}", logs)
        time.sleep(interval)

"""Whether a local process still runs: for the embedded store's ``--exit-with`` (a pid
handed down by the process that started the server, in its own pid namespace) and, for
the leases' holders, only when the holder is provably a process of this very pid
namespace on this very kernel boot.

Why the namespace proof: a hostname does not name a process namespace. Host-network
containers on one head node, or two ``unshare -p`` namespaces, share a hostname, and a
pid in one names nothing (or someone else) in the other; judging another namespace's
holder by ``kill(pid, 0)`` deleted live leases and marked live runs crashed (issue 25).
``process_identity()`` is ``<boot id>-<pid namespace inode>/<start time>``: the kernel
boot, the pid namespace, and the process's start (clock ticks since boot, field 22 of
``/proc/<pid>/stat``), so a reused pid is not the same process either. Anything that
cannot be proved (no ``/proc``, a ``/proc`` of another namespace, an identity from
another namespace or an older release) is never judged here: such a holder's lease
ends only by its own expiry (``sync.lease``).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path


def process_gone(pid: int) -> bool:
    """Whether ``pid`` has ended on this machine. A zombie counts as ended (its parent
    has not reaped it yet); a process we are not allowed to signal still runs. Only for
    a pid of this process's own pid namespace (``--exit-with``: the server's starter);
    lease holders go through ``holder_process_gone``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command name (which may hold spaces and ``)``):
    field 3 (state) is index 0, field 22 (start time) index 19. None: no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[-1].split()
    return fields if len(fields) > 19 else None


@functools.cache
def namespace_id() -> str | None:
    """``<boot id>-<pid namespace inode>`` of this process, or None when ``/proc`` is not
    this namespace's (``unshare -p`` without ``--mount-proc``: ``/proc/self`` then names
    another pid) or cannot be read. Cached: a process never changes pid namespace (a
    forked child has its own pid, not a new namespace; ``unshare -p`` affects children)."""
    try:
        if Path("/proc/self").readlink().name != str(os.getpid()):
            return None
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")
        ns = os.stat("/proc/self/ns/pid")
    except (OSError, ValueError):
        return None
    if not boot:
        return None
    return f"{boot[:12]}-{ns.st_dev:x}.{ns.st_ino}"


def process_identity(pid: int | None = None) -> str | None:
    """``<namespace_id()>/<start time>`` of ``pid`` (default: this process), or None
    when it cannot be proved (see the module's docstring)."""
    ns = namespace_id()
    fields = _stat_fields(os.getpid() if pid is None else pid)
    if ns is None or fields is None:
        return None
    return f"{ns}/{fields[19]}"


def holder_process_gone(identity: str, pid: int) -> bool | None:
    """Whether the process ``pid`` with ``identity`` (from ``process_identity``) has
    ended: True (no such pid, another process under that pid, a zombie), False (it
    runs), or None when it is not provably of this pid namespace and boot: then only
    its lease's renewals say whether it lives."""
    ns, _, start = identity.rpartition("/")
    mine = namespace_id()
    if mine is None or ns != mine or not start.isdigit():
        return None
    fields = _stat_fields(pid)
    if fields is None or fields[19] != start:
        return True
    return fields[0] == "Z"

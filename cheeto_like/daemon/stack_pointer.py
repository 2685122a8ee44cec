"""Finding the config a running ``cheeto daemon up`` runs with.

``daemon up`` runs every service on a *derived* config (``<run dir>/config.yaml``: the
broker, beat file and API key it chose). A command given the config the stack was started
from (``cheeto daemon enqueue sympa_export --config .demo/config.yaml``) would otherwise
publish to that file's broker (often the default ``amqp://…@127.0.0.1:5672``, which is
not the stack's) and wait for a result that never comes.

So ``daemon up`` leaves a pointer, ``$XDG_STATE_HOME/cheeto/stacks/<key>.json``, keyed by
the source config's resolved path and profile, naming the derived config and its own
pid; ``running_stack_config`` follows it while that pid is alive. The pointer is removed
when the stack stops (and ignored, then removed, if the stack died without cleaning up).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from ..config import Config


def _state_home() -> Path:
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")


def pointer_path(source: Path | None, profile: str) -> Path:
    where = str(source.expanduser().resolve()) if source is not None else "<no config file>"
    key = hashlib.sha256(f"{where}\0{profile}".encode()).hexdigest()[:24]
    return _state_home() / "cheeto" / "stacks" / f"{key}.json"


def register(source: Path | None, profile: str, derived: Path, pid: int) -> Path:
    """Say "the stack started from ``source`` runs with ``derived``" (mode 0600)."""
    path = pointer_path(source, profile)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    body = json.dumps({"source": str(source) if source else None, "profile": profile,
                       "config": str(derived), "pid": pid}) + "\n"
    tmp = path.with_suffix(f".{pid}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(body)
    os.replace(tmp, path)
    return path


def unregister(source: Path | None, profile: str, pid: int) -> None:
    """Remove the pointer if it is still this stack's."""
    path = pointer_path(source, profile)
    if _read(path).get("pid") == pid:
        path.unlink(missing_ok=True)


def _read(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running_stack_config(config: Config) -> Path | None:
    """The derived config of a live ``daemon up`` started from ``config``'s file and
    profile, or None. A stale pointer (its stack is gone) is removed."""
    source = Path(config.path) if config.path is not None else None
    path = pointer_path(source, config.profile)
    data = _read(path)
    if not data:
        return None
    derived = Path(str(data.get("config")))
    if not _alive(data.get("pid")) or not derived.is_file():
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    if source is not None and derived.resolve() == source.expanduser().resolve():
        return None  # started from its own derived config: nothing to redirect
    return derived

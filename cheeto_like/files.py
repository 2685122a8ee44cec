"""Small file helpers shared by the CLI and the daemon."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import ExternalError


def write_atomically(path: str | os.PathLike[str], text: str, mode: int = 0o644) -> Path:
    """Write next to the target and rename over it, so readers never see half a file."""
    target = Path(path).expanduser()
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(text)
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise ExternalError(f"cannot write {target}: {exc.strerror}") from None
    return target

"""Small file helpers shared by the CLI and the daemon."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from .errors import ExternalError, InvalidInput


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
        raise output_file_error(target, exc) from None
    except ValueError:  # os.open refuses a NUL in the path
        raise InvalidInput(f"cannot write {path}: a path cannot hold a NUL character") from None
    return target


def read_small_text(path: str | os.PathLike[str], *, limit: int, what: str) -> str:
    """Read a small UTF-8 text file an admin named (a key file): a missing, oversized,
    binary or non-UTF-8 file is bad input (one line), never a crash or a huge read."""
    target = Path(path).expanduser()
    try:
        with open(target, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise InvalidInput(f"cannot read {target}: {exc.strerror}") from None
    except ValueError:  # open refuses a NUL in the path
        raise InvalidInput(f"cannot read {path}: a path cannot hold a NUL character") from None
    if len(data) > limit:
        raise InvalidInput(f"{target} is larger than {limit // 1024} KiB: not {what}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{target} is not UTF-8 text: not {what}") from None
    if "\0" in text:
        raise InvalidInput(f"{target} is a binary file: not {what}")
    return text


def output_file_error(path: str | os.PathLike[str], exc: OSError) -> InvalidInput | ExternalError:
    """A file we were told to write cannot be: a path problem (no such directory, a
    directory, no permission) is the admin's input (exit 2); anything else (disk full, I/O
    error) is a failure (exit 1)."""
    message = f"cannot write {path}: {exc.strerror or exc}"
    if isinstance(exc, FileNotFoundError | NotADirectoryError | IsADirectoryError
                  | PermissionError | FileExistsError) \
            or exc.errno in (errno.ENAMETOOLONG, errno.EROFS, errno.ELOOP):
        return InvalidInput(message)
    return ExternalError(message)

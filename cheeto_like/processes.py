"""Whether a local process still runs, for the leases' holders and the embedded store's
``--exit-with``: one answer for both (a zombie has ended; a pid we may not signal runs).
"""

from __future__ import annotations

import os
from pathlib import Path


def process_gone(pid: int) -> bool:
    """Whether ``pid`` has ended on this machine. A zombie counts as ended (its parent
    has not reaped it yet); a process we are not allowed to signal still runs."""
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

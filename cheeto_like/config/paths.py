"""Where the config file and the state live (the XDG base directories, or the directories a
service manager hands a unit: ``$STATE_DIRECTORY``, ``$RUNTIME_DIRECTORY``), and the names
of the profiled sections: plain ``os``/``pathlib``, so callers that only need a path stay
cheap."""

from __future__ import annotations

import os
from pathlib import Path

PROFILED_SECTIONS = ("mongo", "ldap", "daemon", "api")
DEFAULT_PROFILE = "default"


def xdg_config_home() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")


def xdg_state_home() -> Path:
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")


def state_directory() -> Path | None:
    """The state directory a service manager gave this process: systemd's
    ``$STATE_DIRECTORY`` (``StateDirectory=``; the first entry when the unit names
    several, colon-separated), which the container image sets to its state volume too.
    None when unset: the process is not a service, and the XDG defaults apply."""
    value = os.environ.get("STATE_DIRECTORY", "").split(":", 1)[0].strip()
    return Path(value) if value and os.path.isabs(value) else None


def runtime_directory() -> Path | None:
    """systemd's ``$RUNTIME_DIRECTORY`` (``RuntimeDirectory=``; the first entry), or None."""
    value = os.environ.get("RUNTIME_DIRECTORY", "").split(":", 1)[0].strip()
    return Path(value) if value and os.path.isabs(value) else None


def default_beat_schedule() -> Path:
    """Beat's schedule file: in the unit's (or container's) state directory when there is
    one, else the classic ``/var/lib/cheeto/celerybeat-schedule``."""
    state = state_directory()
    return (state or Path("/var/lib/cheeto")) / "celerybeat-schedule"


def xdg_data_home() -> Path:
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")


def default_config_path() -> Path:
    return xdg_config_home() / "cheeto" / "config.yaml"

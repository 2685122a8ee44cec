"""Where the config file and the state live (the XDG base directories), and the names of
the profiled sections: plain ``os``/``pathlib``, so callers that only need a path stay cheap."""

from __future__ import annotations

import os
from pathlib import Path

PROFILED_SECTIONS = ("mongo", "ldap", "daemon", "api")
DEFAULT_PROFILE = "default"


def xdg_config_home() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")


def xdg_state_home() -> Path:
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")


def xdg_data_home() -> Path:
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")


def default_config_path() -> Path:
    return xdg_config_home() / "cheeto" / "config.yaml"

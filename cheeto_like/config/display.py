"""Showing a config (``cheeto config show``, status lines naming a broker or a store) without
its secrets."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, SecretStr

if TYPE_CHECKING:
    from .load import Config

# The password runs to the *last* ``@`` of the URI (of each ``;``-separated failover URI):
# an unencoded ``@`` or ``/`` in a password must not leave its tail visible. Masking too
# much (an ``@`` in a query string) is harmless; masking too little is a leak.
_URI_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/;]*):(?P<pw>[^;]*)@",
                           re.IGNORECASE)
MASK = "********"


def mask_uri(uri: str) -> str:
    """Hide the password part of ``scheme://user:password@host`` URIs."""
    return _URI_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", uri)


def config_for_display(config: Config) -> dict[str, Any]:
    """The resolved config as plain data with every secret masked."""

    def scrub(value: Any) -> Any:
        if isinstance(value, SecretStr):
            return MASK
        if isinstance(value, BaseModel):
            return {k: scrub(getattr(value, k)) for k in type(value).model_fields}
        if isinstance(value, dict):
            return {k: scrub(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [scrub(v) for v in value]
        if isinstance(value, Path):
            return str(value)
        if isinstance(value, str):
            return mask_uri(value)
        return value

    return scrub(config)

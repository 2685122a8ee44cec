"""Ask a RabbitMQ node for its ``consumer_timeout`` with ``rabbitmqctl eval``.

RabbitMQ 3.10 (Debian 12) exposes the setting nowhere else: the management API has no
route for the node's application environment, and per-queue timeouts (a
``consumer-timeout`` policy or an ``x-consumer-timeout`` argument) arrived in 3.12. So
only a process that can reach the node's Erlang distribution (its host, its cookie,
``RABBITMQ_NODENAME``) can read it; anywhere else the caller says how to set it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from ..errors import ExternalError
from .process import run_process

_EXPR = "application:get_env(rabbit, consumer_timeout)."
_OK = re.compile(r"\{ok,\s*(\d+|infinity|false)\}")


async def consumer_timeout_ms(binary: str = "rabbitmqctl", *, env: Mapping[str, str] | None = None,
                              time_limit: float = 30.0) -> int | None:
    """The node's consumer_timeout in ms; ``None`` when it has none (unset, ``infinity``
    or ``false``: deliveries never time out). ``ExternalError`` when the node cannot be
    asked (no rabbitmqctl, no cookie, another host), with rabbitmqctl's first line."""
    code, out, err, _ = await run_process([binary, "-q", "eval", _EXPR], time_limit=time_limit,
                                          env=dict(env if env is not None else os.environ),
                                          missing=f"{binary} is not installed here")
    text = out.strip()
    if code is None:
        raise ExternalError(f"{binary} eval did not answer within {time_limit:g}s")
    if code != 0:
        first = next((line.strip() for line in (err or out).splitlines() if line.strip()),
                     f"exit {code}")
        raise ExternalError(f"{binary} cannot reach the broker node: {first}")
    if text == "undefined":
        return None
    match = _OK.fullmatch(text)
    if match is None:
        raise ExternalError(f"{binary} eval answered {text[:80]!r}, not a consumer_timeout")
    value = match.group(1)
    return int(value) if value.isdigit() else None

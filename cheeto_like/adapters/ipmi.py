"""The node's power draw through ``ipmitool dcmi power reading`` (the BMC's DCMI sensor).

Only the "Instantaneous power reading" line is used; the parser refuses anything else
rather than guess, so a BMC that answers oddly is a reported failure, not a made-up
number.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping

from ..errors import ExternalError
from .process import run_process

READING = re.compile(r"^\s*Instantaneous power reading\s*:\s*(\d+(?:\.\d+)?)\s*Watts\s*$",
                     re.IGNORECASE | re.MULTILINE)
TIME_LIMIT_S = 15.0


def parse_power_reading(text: str) -> float:
    """Watts from ``ipmitool dcmi power reading`` output; ``ValueError`` when absent."""
    found = READING.search(text)
    if found is None:
        raise ValueError("no 'Instantaneous power reading: N Watts' line in ipmitool's output")
    watts = float(found[1])
    if not math.isfinite(watts):
        raise ValueError(f"ipmitool reported an impossible reading ({found[1][:20]}… W)")
    return watts


async def power_reading(*, ipmitool: str = "ipmitool", sudo: bool = False,
                        env: Mapping[str, str] | None = None) -> float:
    """One reading in watts. ``ExternalError`` when ipmitool fails or says something
    we cannot read (transient: the next poll may work)."""
    argv = [*(["sudo", "-n"] if sudo else []), ipmitool, "dcmi", "power", "reading"]
    code, out, err, _ = await run_process(argv, time_limit=TIME_LIMIT_S,
                                          env=dict(env if env is not None else os.environ),
                                          missing=f"{argv[0]} is not installed (or not on PATH)")
    if code is None:
        raise ExternalError(f"ipmitool took longer than {TIME_LIMIT_S:.0f}s", transient=True)
    if code != 0:
        detail = (err.strip() or out.strip()).splitlines()
        raise ExternalError(f"ipmitool exited with {code}: {detail[0] if detail else ''}",
                            transient=True)
    try:
        return parse_power_reading(out)
    except ValueError as exc:
        raise ExternalError(str(exc), transient=True) from None

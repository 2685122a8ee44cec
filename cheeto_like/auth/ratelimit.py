"""Failed sign-ins, limited per user name and per client address.

In memory, so it holds for one API process (a restart forgets, and several processes
each count their own); that is enough to make guessing slow, which is its purpose.
After ``max_failures`` failures within ``window`` seconds a key (``user:<name>`` or
``addr:<ip>``) is refused until its oldest failure ages out. A success clears the
user's count, not the address's.
"""

from __future__ import annotations

import time
from collections import deque


class LoginLimiter:
    def __init__(self, max_failures: int, window: float, max_keys: int = 100_000) -> None:
        self.max_failures = max_failures
        self.window = window
        self.max_keys = max_keys
        self._failures: dict[str, deque[float]] = {}

    def _recent(self, key: str, now: float) -> deque[float]:
        times = self._failures.get(key)
        if times is None:
            return deque()
        while times and times[0] <= now - self.window:
            times.popleft()
        if not times:
            del self._failures[key]
        return times

    def retry_after(self, keys: list[str], now: float | None = None) -> float:
        """Seconds until every key may try again (0: go ahead)."""
        now = time.monotonic() if now is None else now
        wait = 0.0
        for key in keys:
            times = self._recent(key, now)
            if len(times) >= self.max_failures:
                wait = max(wait, times[0] + self.window - now)
        return wait

    def failed(self, keys: list[str], now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if len(self._failures) >= self.max_keys:  # bounded memory under a spray
            self._failures.clear()
        for key in keys:
            self._failures.setdefault(key, deque()).append(now)

    def succeeded(self, key: str) -> None:
        self._failures.pop(key, None)

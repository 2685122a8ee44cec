"""The ``usage`` section: usage accounting's collection window, rate card and notices."""

from __future__ import annotations

from pydantic import Field, field_validator

from .base import Block


class UsageRate(Block):
    """Prices per normalised hour (CPU-hours; GPU-hours after the GPU-type factors)."""

    cpu_hour: float = Field(default=0.0, ge=0)  # price of one CPU-hour, in usage.currency
    # price of one normalised GPU-hour, in usage.currency
    gpu_hour: float = Field(default=0.0, ge=0)


class UsageConfig(Block):
    """Usage accounting at every site (``ng usage …``, the ``usage_collect`` task)."""

    overlap_minutes: float = Field(default=60.0, ge=0)  # each collect re-reads this much
    # the one currency budgets and rates are in (e.g. USD)
    currency: str = Field(default="USD", min_length=1, max_length=8)
    # the optional rate card: site -> partition ('*': every other partition) -> prices
    rates: dict[str, dict[str, UsageRate]] = Field(default_factory=dict)
    # percent of a quota at which users (or an account's sponsors) get one notice
    thresholds: list[int] = Field(default_factory=lambda: [75, 90, 100], max_length=10)

    @field_validator("thresholds")
    @classmethod
    def _thresholds(cls, value: list[int]) -> list[int]:
        if any(not 1 <= t <= 1000 for t in value):
            raise ValueError("thresholds are percents between 1 and 1000")
        return sorted(set(value))

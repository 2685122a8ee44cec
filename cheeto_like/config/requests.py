"""The ``requests`` section: the business calendar request SLAs are counted in, and each
request kind's target and approvals."""

from __future__ import annotations

from datetime import date
from typing import Literal

from pydantic import Field, field_validator, model_validator

from .base import Block


class RequestKindConfig(Block):
    """One request kind: its SLA target (``2d`` business days, ``4h`` business hours) and
    whether an operator approves after the group's sponsor."""

    sla: str = "2d"  # target: business days (2d) or business hours (4h)
    operator: bool = False  # an operator approves after the group's sponsor

    @field_validator("sla")
    @classmethod
    def _sla(cls, value: str) -> str:
        from ..sla import parse_target

        parse_target(value)
        return value


def _default_request_kinds() -> dict[str, RequestKindConfig]:
    return {"account": RequestKindConfig(), "join": RequestKindConfig(),
            "leave": RequestKindConfig(),
            "access": RequestKindConfig(operator=True),
            "quota": RequestKindConfig(operator=True),
            "storage": RequestKindConfig(sla="3d", operator=True)}


class RequestsConfig(Block):
    """The request queue (``ng request …``): the business calendar SLAs are counted in
    (``timezone``, ``workdays``, ``holidays``) and each kind's target and approvals
    (kinds left out keep their defaults)."""

    timezone: str = "UTC"  # IANA time zone of the business calendar
    # the business days of the week (mon, tue, ..., sun)
    workdays: list[str] = Field(default_factory=lambda: ["mon", "tue", "wed", "thu", "fri"])
    # dates that are not business days (YYYY-MM-DD)
    holidays: list[date] = Field(default_factory=list)
    kinds: dict[Literal["account", "join", "leave", "access", "quota", "storage"],
                RequestKindConfig] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _calendar(self) -> RequestsConfig:
        from ..sla import Calendar

        Calendar.of(self.timezone, self.workdays, self.holidays)
        merged = _default_request_kinds() | dict(self.kinds)
        object.__setattr__(self, "kinds", merged)
        return self

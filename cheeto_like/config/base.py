"""What every config block shares: unknown keys are errors and blocks are frozen."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

UserPath = Annotated[Path, AfterValidator(lambda p: p.expanduser())]


class Block(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

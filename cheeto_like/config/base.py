"""What every config block shares: unknown keys are errors and blocks are frozen."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

UserPath = Annotated[Path, AfterValidator(lambda p: p.expanduser())]


class Block(BaseModel):
    """A config block. Its validator is built on first use (``defer_build``): a command
    reads a few sections, and building every block's at import cost ~40 ms (issue 31)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

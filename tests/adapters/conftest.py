"""The ``mgr`` fixture of the sacctmgr conformance modules (``test_sacctmgr_*.py``): one
``Mgr`` over the module's slurmdbd (``slurm_accounting`` restarts it empty per module)."""

from __future__ import annotations

import pytest

from tests.adapters.sacctmgr_harness import Mgr
from tests.services.slurm import SlurmAccounting


@pytest.fixture
def mgr(slurm_accounting: SlurmAccounting) -> Mgr:
    return Mgr(slurm_accounting)

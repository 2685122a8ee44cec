"""Nodes and partitions from ``sinfo``: what the cluster monitor shows and judges.

One call, node-oriented (``-N``), every partition (``-a``), no header (``-h``), with
explicit ``|``-separated fields: node, partition (``*`` marks the default), partition
availability, node state (long form: ``drained``, ``draining``, ``down*``, ``idle~``),
CPUs, GRES, the reason an admin gave, when it was set and by whom. Times come as epoch
seconds (``SLURM_TIME_FORMAT=%s``), so the local time zone of the head node never
matters; a node without a reason says ``Unknown``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ..errors import ExternalError
from .process import run_process
from .squeue import parse_gres

FORMAT = "%N|%P|%a|%T|%c|%G|%H|%u|%E"
FIELDS = 9
TIME_ENV = {"SLURM_TIME_FORMAT": "%s"}
# states in which a node takes no new job (a trailing * means "not responding")
_UNAVAILABLE = ("drain", "down", "fail", "inval", "maint", "reboot", "unk")
_SOCKETS = re.compile(r"\([^)]*\)")  # gpu:a100:1(S:0-1) -> gpu:a100:1


def parse_epoch(text: str) -> datetime | None:
    """``1764558103`` -> an aware datetime; ``Unknown``/``N/A``/``None`` -> None."""
    value = text.strip()
    if not value.isdigit() or int(value) <= 0:
        return None
    return datetime.fromtimestamp(int(value), UTC)


@dataclass(frozen=True)
class NodeRow:
    """One node in one partition (a node in two partitions is two rows)."""

    node: str
    partition: str
    default_partition: bool
    partition_up: bool
    state: str
    cpus: int
    gpus: tuple[tuple[str | None, int], ...]
    reason: str | None
    reason_since: datetime | None
    reason_by: str | None

    @property
    def unavailable(self) -> bool:
        """Takes no new jobs: drained, draining, down, failed, not responding."""
        return self.state.endswith("*") or self.out_of_service

    @property
    def out_of_service(self) -> bool:
        """Taken out by an admin or by Slurm (drained, down, failed), as opposed to a
        node that missed a ping for a moment (``idle*``), which Slurm itself sets down
        once ``SlurmdTimeout`` passes."""
        state = self.state.lower()
        return any(word in state for word in _UNAVAILABLE)


def parse_nodes(text: str) -> list[NodeRow]:
    rows = []
    for line in text.splitlines():
        parts = line.split("|", FIELDS - 1)
        if len(parts) != FIELDS or not parts[4].strip().isdigit():
            continue  # a "CLUSTER: name" banner or a malformed line
        node, partition, avail, state, cpus, gres, since, by, reason = (p.strip() for p in parts)
        plain_gres = _SOCKETS.sub("", gres) if gres not in ("(null)", "N/A") else ""
        rows.append(NodeRow(
            node=node, partition=partition.rstrip("*"), default_partition=partition.endswith("*"),
            partition_up=avail.lower() == "up", state=state, cpus=int(cpus),
            gpus=parse_gres(plain_gres, 1),
            reason=None if reason.lower() in ("none", "(null)", "") else reason,
            reason_since=parse_epoch(since),
            reason_by=None if by.lower() in ("unknown", "(null)", "") else by))
    return rows


@dataclass
class Sinfo:
    binary: str = "sinfo"
    timeout: float = 30.0
    env: Mapping[str, str] = field(default_factory=dict)

    async def nodes(self, cluster: str) -> list[NodeRow]:
        argv = [self.binary, "-h", "-N", "-a", f"--clusters={cluster}", "-o", FORMAT]
        code, out, err, _ = await run_process(
            argv, time_limit=self.timeout, env={**os.environ, **self.env, **TIME_ENV},
            missing=f"{self.binary} not found (slurm-client)")
        if code != 0:
            detail = (err.strip().splitlines() or ["timed out" if code is None else ""])[0]
            raise ExternalError(f"sinfo failed: {detail}")
        return parse_nodes(out)

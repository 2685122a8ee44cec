"""What every reconciler's report says about its items, whatever the target.

A run's items (one per command or LDAP write, ``models.sync.SyncItem``) end ``ok``,
``failed``, ``pending`` (refused for a reason that clears by itself, such as sacctmgr's
"Job(s) active" for a removal; the next run retries it) or ``skipped`` (not attempted
because something before it failed). A run is ``ok`` only when nothing failed *and*
nothing was skipped: a skipped deletion is still drift left behind, and the operator
must see it. Pending items do not fail a run; the report lists them.
"""

from __future__ import annotations

from ..models.sync import SyncItem


class ItemOutcomes:
    """Mixed into a reconciler's ``Report`` dataclass, which declares ``items``."""

    items: list[SyncItem]

    @property
    def failed(self) -> list[SyncItem]:
        return [i for i in self.items if i.outcome == "failed"]

    @property
    def skipped(self) -> list[SyncItem]:
        return [i for i in self.items if i.outcome == "skipped"]

    @property
    def pending(self) -> list[SyncItem]:
        return [i for i in self.items if i.outcome == "pending"]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.skipped

    def tally(self) -> dict[str, dict[str, int]]:
        """Outcome counts per batch, in the order the batches ran."""
        out: dict[str, dict[str, int]] = {}
        for item in self.items:
            counts = out.setdefault(item.batch, {"ok": 0, "failed": 0, "skipped": 0,
                                                 "pending": 0})
            counts[item.outcome] = counts.get(item.outcome, 0) + 1
        return out

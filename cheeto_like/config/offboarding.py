"""The ``offboarding`` section: what a reap does to a person's things at each site, and
how long a programme's members keep their accounts after the programme ends.

The reap (``ng iam reap``, daemon task ``reap``) applies the policy of every site the
user is on, in its one transaction, changing *records* only; what reaches LDAP, Slurm
and the exports then follows at the next sync, under that sync's ``--max-deletions``
and daily removal budget. This project never deletes data on disk: storage ``remove``
and ``archive`` only set the storage records' expiry (the exports drop them then).

- ``ssh_keys``: ``keep`` | ``remove`` (the user's key records are deleted; keys are
  global, so one site saying ``remove`` removes them);
- ``memberships``: ``keep`` | ``remove`` (the user's group roles at that site);
- ``storage``: ``keep`` | ``archive`` | ``remove``, after ``storage_after_days``: the
  user's own storage records at the site expire that many days after the reap
  (``archive``: the operator copies the data away before then, by hand);
- ``slurm``: ``remove``: an inactive user is in no Slurm roster, so the next applied
  Slurm sync deletes their associations (the only behaviour; stated so the dry run and
  the audit can show it).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import Block


class SiteOffboarding(Block):
    # keep, or remove the user's key records (global: every site)
    ssh_keys: Literal["keep", "remove"] = "keep"
    # keep, or remove the user's group roles at the site
    memberships: Literal["keep", "remove"] = "keep"
    # keep, or archive/remove: the user's storage records expire after storage_after_days
    storage: Literal["keep", "archive", "remove"] = "keep"
    # days after the reap at which archived or removed storage expires
    storage_after_days: int = Field(default=30, ge=0, le=36500)
    # remove: the next Slurm sync deletes the user's associations (the only choice)
    slurm: Literal["remove"] = "remove"


class OffboardingConfig(Block):
    """``default`` applies to sites ``sites`` does not name (keys are site names)."""

    program_grace_days: int = Field(default=30, ge=0, le=36500)
    # the policy of sites that sites does not name
    default: SiteOffboarding = Field(default_factory=SiteOffboarding)
    sites: dict[str, SiteOffboarding] = Field(default_factory=dict)

    def for_site(self, site: str) -> SiteOffboarding:
        return self.sites.get(site, self.default)

    def removes_anything(self) -> bool:
        """Whether any site's policy changes a record (else the audit has nothing to
        check beyond expiries)."""
        return any(p.ssh_keys == "remove" or p.memberships == "remove" or p.storage != "keep"
                   for p in (self.default, *self.sites.values()))

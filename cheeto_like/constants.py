"""Domain constants: allowed values and the id bands the allocators hand out from.

Numbers follow the reference system. Two of its defects are fixed here: the id ceiling
is 2**32 - 1 (a uid of 2**32 does not fit a 32-bit uid_t), and every band has an
explicit upper bound so one allocator can never jump into another band.
"""

from __future__ import annotations

from typing import Final, NamedTuple

USER_TYPES: Final = ("user", "admin", "system", "class", "shared")
GROUP_TYPES: Final = ("user", "access", "status", "system", "group", "admin", "class",
                      "program")
USER_STATUSES: Final = ("active", "inactive", "disabled", "offboarding")
ACCESS_TYPES: Final = ("login-ssh", "ondemand", "compute-ssh", "root-ssh", "sudo", "slurm")
MEMBERSHIP_ROLES: Final = ("member", "sponsor", "sudoer", "slurmer")

DEFAULT_SHELL: Final = "/usr/bin/bash"
NOLOGIN_SHELL: Final = "/usr/sbin/nologin"
ENABLED_SHELLS: Final = ("/bin/sh", "/bin/bash", "/bin/zsh", "/usr/bin/sh", "/usr/bin/zsh",
                         "/usr/bin/bash")
DISABLED_SHELLS: Final = ("/usr/sbin/nologin-account-disabled", "/bin/false", "/usr/sbin/nologin")
SHELLS: Final = ENABLED_SHELLS + DISABLED_SHELLS

ID_MAX: Final = 4_294_967_295  # largest 32-bit uid/gid
NAME_MAX_LEN: Final = 32

DEFAULT_SYSTEM_EMAIL: Final = "root@localhost.localdomain"  # mail.centre.helpdesk wins (CLI)


class IdBand(NamedTuple):
    """A half-open range [start, stop) that one allocator hands ids out of."""

    start: int
    stop: int

    def __contains__(self, value: object) -> bool:
        return isinstance(value, int) and self.start <= value < self.stop


SPONSOR_GID_BASE: Final = 100_000_000  # sponsor group gid = this + sponsor uid
SHARED_USER_BAND: Final = IdBand(2_000_000_000, 3_000_000_000)
CLASS_USER_BAND: Final = IdBand(3_000_000_000, 3_900_000_000)
CLASS_GROUP_BAND: Final = IdBand(3_000_000_000, 3_001_000_000)
SPECIAL_GID_START: Final = 3_333_333_000  # access/status groups count up from here
LAB_GROUP_BAND: Final = IdBand(3_900_000_000, 3_910_000_000)
SYSTEM_USER_BAND: Final = IdBand(4_000_000_000, ID_MAX + 1)
SYSTEM_GROUP_BAND: Final = IdBand(4_000_000_000, 4_001_000_000)

# Access/status shorthand -> the posix group that carries it in LDAP.
ACCESS_GROUP_NAMES: Final = {a: f"{a}-users" for a in ACCESS_TYPES}
STATUS_GROUP_NAMES: Final = {s: f"{s}-users" for s in USER_STATUSES}

STORAGE_BACKENDS: Final = ("zfs", "quobyte")
STORAGE_CATEGORIES: Final = ("home", "group", "share")
MOUNT_FSTYPES: Final = ("nfs", "nfs4", "cvmfs")
SLURM_QOS_VALID_FLAGS: Final = (
    "DenyOnLimit", "EnforceUsageThreshold", "NoDecay", "NoReserve", "OverPartQOS",
    "PartitionMaxNodes", "PartitionMinNodes", "PartitionTimeLimit", "RequiresReservation",
    "UsageFactorSafe",
)
SLURM_LIMIT_BUCKETS: Final = ("group_limits", "user_limits", "job_limits")

HIPPO_EVENT_ACTIONS: Final = ("CreateAccount", "AddAccountToGroup", "UpdateSshKey",
                              "RemoveAccountFromGroup", "CreateGroup")
HIPPO_EVENT_STATUSES: Final = ("Pending", "Complete", "Failed", "Canceled")

IAM_USER_TYPES: Final = ("employee", "faculty", "staff", "student", "external")
IAM_SYNCABLE_USER_TYPES: Final = ("user", "admin")
IAM_STATUSES: Final = ("present", "missing")

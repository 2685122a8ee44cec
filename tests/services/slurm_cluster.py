"""A live one-node Slurm cluster for tests: the accounting stack plus slurmctld + slurmd.

`SlurmCluster` extends `SlurmAccounting` (munged + MariaDB + slurmdbd) with slurmctld and
slurmd on loopback (NodeName=localhost, two typed fake GPUs `gpu:a100:1,gpu:t4:1`, each a
`File=` symlink to /dev/null), so tests can submit real jobs as real unix users and assert
on what Slurm does: a job runs, is refused at submit, or pends with a reason. The recipe
and its measured gotchas are in ../shared/slurm-cluster.md.

Jobs of other users need root (slurmd setuids to the job user), unix users that exist in
/etc/passwd (`ensure_unix_user`), o+x on every directory above BASE (BASE lives directly
under the system temp dir, mode 0711) and a munge socket directory others can reach.

Usage::

    with SlurmCluster() as cluster:
        cluster.sacctmgr("-i", "add", "account", "lab", "cluster=farm")
        ensure_unix_user("alice")
        cluster.sacctmgr("-i", "add", "user", "alice", "account=lab", "cluster=farm")
        job = cluster.submit("alice", "--wrap", "sleep 1").job_id
        cluster.wait_started(job)
"""

from __future__ import annotations

import contextlib
import grp
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cheeto_like.config.slurm import QuotaEnforcement
from cheeto_like.enforcement.layout import Layout, conf_lines, layout
from cheeto_like.enforcement.render import install

from ._proc import ServiceError, StepTimer, ensure_running, free_ports, kill_and_wait, run, spawn
from ._proc import wait_for as _wait_for
from .slurm import SlurmAccounting

__all__ = ["GPU_TYPES", "JobState", "SlurmCluster", "Submitted", "ensure_unix_user",
           "rename_unix_user"]

# typed fake GPUs: one device file each (the later usage-accounting issue needs types)
GPU_TYPES: tuple[str, ...] = ("a100", "t4")
STARTED = frozenset({"RUNNING", "COMPLETING", "COMPLETED"})
FINISHED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                      "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE"})
_JOB_ID = re.compile(r"^(\d+)")


def ensure_unix_user(name: str) -> pwd.struct_passwd:
    """Create `name` (no home, no shell) unless it exists; safe against a concurrent useradd.

    Job users must exist on this machine: slurmd resolves and setuids to them.
    """
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(name)
    argv = ["useradd", "-M", "-d", "/nonexistent", "-s", "/usr/sbin/nologin", name]
    with contextlib.suppress(KeyError):  # a group left behind (userdel of a renamed user)
        argv[1:1] = ["-g", str(grp.getgrnam(name).gr_gid)]
    result = run(argv, check=False)
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise ServiceError(f"useradd {name} failed: {result.stderr.strip()}") from None


def rename_unix_user(old: str, new: str) -> None:
    """``usermod -l new old`` (same uid), as an admin does beside ``ng user rename``.

    usermod refuses while the user has processes (a job still running)."""
    run(["usermod", "-l", new, old])


@dataclass(frozen=True)
class Submitted:
    """An sbatch call: the job id when Slurm accepted it, else the refusal on stderr."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def accepted(self) -> bool:
        return self.returncode == 0 and self.job_id is not None

    @property
    def job_id(self) -> str | None:
        match = _JOB_ID.match(self.stdout.strip())
        return match.group(1) if match else None


@dataclass(frozen=True)
class JobState:
    """What slurmctld says about a job: state (RUNNING, PENDING, …) and reason."""

    job_id: str
    state: str
    reason: str
    account: str = ""
    qos: str = ""


class SlurmCluster(SlurmAccounting):
    """slurmdbd + slurmctld + slurmd on loopback; see the module docstring.

    After start(): `cluster_name` is registered (slurmctld does it), `env` holds SLURM_CONF
    (+ LD_PRELOAD), and the job helpers (`submit`, `srun`, `job`, `wait_*`) work.
    """

    def __init__(self, base_dir: Path | None = None, *, cluster_name: str = "farm",
                 startup_timeout: float = 30.0, nodelay: bool = True,
                 shim_cache: Path | None = None) -> None:
        """`base_dir` is ignored for BASE itself (it must be reachable by job users, and
        pytest's tmp dirs are 0700): BASE is a fresh 0711 directory in the system temp dir.
        """
        tres = (("gres", "gpu"), *(("gres", f"gpu:{t}") for t in GPU_TYPES))
        super().__init__(None, cluster_name=cluster_name, startup_timeout=startup_timeout,
                         default_tres=tres, nodelay=nodelay, shim_cache=shim_cache)
        self.ctld_port = 0
        self.slurmd_port = 0
        self.quiet_since = datetime.now(UTC)
        self.enforcement_site = cluster_name

    # ------------------------------------------------------------ the quota check

    def enforcement_settings(self, **changes: object) -> QuotaEnforcement:
        """The ``slurm.enforcement`` block a test config gives the site worker: state
        under BASE, slurmctld's user (root here), plus ``changes``."""
        values = {"state_dir": self.base / "cheeto", "slurm_user": self.run_user,
                  "sites": [self.enforcement_site], **changes}
        return QuotaEnforcement.model_validate(values)

    @property
    def enforcement(self) -> Layout:
        return layout(self.enforcement_settings(), self.enforcement_site, self.slurm_conf)

    def install_enforcement(self, **changes: object) -> Layout:
        """What `ng site enforcement install` writes (the same function); slurmctld
        reloads job_submit.lua by itself when the file changes."""
        settings = self.enforcement_settings(**changes)
        where = layout(settings, self.enforcement_site, self.slurm_conf)
        install(settings, where)
        return where

    def clear_enforcement_state(self) -> None:
        """No table, no reservations, an empty spool, the default plugin (fail_open):
        every module starts without another module's quotas."""
        where = self.enforcement
        for path in (where.table, where.reservations,
                     where.reservations.with_name(where.reservations.name + "-wal"),
                     where.reservations.with_name(where.reservations.name + "-shm")):
            path.unlink(missing_ok=True)
        if where.spool.is_dir():
            for entry in where.spool.iterdir():
                entry.unlink(missing_ok=True)
        self.install_enforcement()

    # ------------------------------------------------------------ bring-up hooks

    def _make_base(self) -> Path:
        base = Path(tempfile.mkdtemp(prefix="slurmc-", dir=tempfile.gettempdir()))
        base.chmod(0o711)
        return base

    def _prepare_dirs(self) -> None:
        super()._prepare_dirs()
        for sub in ("state", "spool", "dev", "jobs"):
            (self.base / sub).mkdir()
        # submitters (sbatch as alice) must reach munge.sock; the key itself stays 0600
        (self.base / "munge").chmod(0o755)
        (self.base / "jobs").chmod(0o1777)  # job output, writable by every job user
        for index, _ in enumerate(GPU_TYPES):
            (self.base / "dev" / f"nvidia{index}").symlink_to("/dev/null")

    def _build_shim(self, timer: StepTimer) -> None:
        """Job users load the shim too (sbatch as alice inherits LD_PRELOAD), so it must be
        readable by them: copy the cached build into BASE/lib (0755) instead of using the
        cache, which lives under root's 0700 home."""
        super()._build_shim(timer)
        if self.shim is not None and not self.shim.is_relative_to(self.base):
            local = self.base / "lib" / self.shim.name
            shutil.copyfile(self.shim, local)
            local.chmod(0o755)
            self.shim = local

    def _slurm_conf_text(self) -> str:
        self.ctld_port, self.slurmd_port = free_ports(2)
        hardware = run(["slurmd", "-C"]).stdout.splitlines()[0].split()
        # the node line takes the real topology (CPUs alone makes Slurm assume 2 sockets)
        topology = " ".join(w for w in hardware
                            if not w.startswith(("NodeName=", "RealMemory=")))
        gres = ",".join(f"gpu:{t}:1" for t in GPU_TYPES)
        tres = ",".join(["gres/gpu", *(f"gres/gpu:{t}" for t in GPU_TYPES)])
        base = self.base
        return (
            super()._slurm_conf_text().replace("AccountingStorageTRES=gres/gpu\n",
                                               f"AccountingStorageTRES={tres}\n")
            + f"SlurmctldPort={self.ctld_port}\n"
            f"SlurmdPort={self.slurmd_port}\n"
            "CommunicationParameters=NoInAddrAny,NoCtldInAddrAny\n"  # loopback only
            f"SlurmdUser={self.run_user}\n"
            # the quota check, exactly as `ng site enforcement show` says: the Lua
            # plugin, the completion hook, AccountingStorageEnforce with `safe`
            + "".join(f"{line}\n" for line in conf_lines(self.enforcement)) +
            f"StateSaveLocation={base / 'state'}\n"
            f"SlurmdSpoolDir={base / 'spool'}\n"
            f"SlurmctldPidFile={base / 'slurmctld.pid'}\n"
            f"SlurmdPidFile={base / 'slurmd.pid'}\n"
            f"SlurmctldLogFile={self._log('slurmctld.log')}\n"
            f"SlurmdLogFile={self._log('slurmd.log')}\n"
            "SlurmctldDebug=info\nSlurmdDebug=info\n"
            "MailProg=/bin/true\n"
            "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
            "JobAcctGatherType=jobacct_gather/linux\nJobAcctGatherFrequency=task=1\n"
            "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core_Memory\n"
            "DefMemPerCPU=100\n"
            # GrpTRESMins needs multifactor; usage accrues every PriorityCalcPeriod minutes
            "PriorityType=priority/multifactor\nPriorityCalcPeriod=1\n"
            "PriorityDecayHalfLife=0\nPriorityUsageResetPeriod=NONE\n"
            # re-evaluate pending jobs every 1-2 s (defaults 60/30 s) after a limit changes
            "SchedulerType=sched/backfill\nSchedulerParameters=sched_interval=2,bf_interval=1\n"
            "MpiDefault=none\nSwitchType=switch/none\nReturnToService=2\n"
            "KillWait=2\nMinJobAge=300\n"
            f"NodeName=localhost NodeAddr=127.0.0.1 {topology} RealMemory=1000 "
            f"Gres={gres} State=UNKNOWN\n"
            "PartitionName=cpu Nodes=localhost Default=YES MaxTime=60 State=UP\n"
            "PartitionName=gpu Nodes=localhost MaxTime=60 State=UP\n"
        )

    def _write_configs(self) -> None:
        super()._write_configs()
        lines = [f"NodeName=localhost Name=gpu Type={t} File={self.base / 'dev'}/nvidia{i}\n"
                 for i, t in enumerate(GPU_TYPES)]
        (self.base / "etc" / "gres.conf").write_text("".join(lines))
        self.install_enforcement()

    def _start_cluster(self, timer: StepTimer) -> None:
        ctld_logs = [self._log("slurmctld.out"), self._log("slurmctld.log")]
        ctld = spawn(["slurmctld", "-D"], log=ctld_logs[0], env=self.client_env(), cwd=self.base)
        self._procs["slurmctld"] = ctld

        def ctld_up() -> bool:
            ensure_running(ctld, "slurmctld", ctld_logs)
            return "is UP" in self._client(["scontrol", "ping"], check=False).stdout

        _wait_for(ctld_up, self.startup_timeout, "slurmctld to answer ping", logs=ctld_logs)
        timer.mark("slurmctld answering")
        slurmd_logs = [self._log("slurmd.out"), self._log("slurmd.log")]
        slurmd = spawn(["slurmd", "-D", "-N", "localhost"], log=slurmd_logs[0],
                       env=self.client_env(), cwd=self.base)
        self._procs["slurmd"] = slurmd

        def node_idle() -> bool:
            ensure_running(slurmd, "slurmd", slurmd_logs)
            out = self._client(["sinfo", "-h", "-n", "localhost", "-o", "%T"], check=False)
            return out.stdout.strip().splitlines()[:1] == ["idle"]

        _wait_for(node_idle, self.startup_timeout, "node localhost to be idle",
                  logs=[*slurmd_logs, self._log("slurmctld.log")])
        timer.mark("slurmd registered, node idle")
        if self.cluster_name not in self.clusters:
            self.clusters.append(self.cluster_name)  # slurmctld registered it

    def stop(self) -> None:
        """Cancel jobs, kill our slurmstepd's (found by this SLURM_CONF), then the daemons."""
        if "slurmctld" in self._procs and self.base.is_absolute():
            with contextlib.suppress(Exception):
                self._client(["scancel", "--full", "--user", "*"], check=False, timeout=5)
                jobs = self._client(["squeue", "-h", "-o", "%F"], check=False, timeout=5)
                if ids := jobs.stdout.split():
                    self._client(["scancel", *ids], check=False, timeout=5)
        with contextlib.suppress(ServiceError):
            kill_and_wait(self._steps(), signal.SIGKILL, timeout=5)
        super().stop()

    def _steps(self) -> list[int]:
        """slurmstepd processes forked by *our* slurmd (they carry our SLURM_CONF)."""
        if not self.base.is_absolute():
            return []
        marker = f"SLURM_CONF={self.slurm_conf}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                if (entry / "comm").read_text().strip() != "slurmstepd":
                    continue
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
        return found

    # ------------------------------------------------------------ client helpers

    def _client(self, argv: Sequence[str], *, check: bool = True,
                timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        return run(list(argv), env=self.client_env(), timeout=timeout, check=check,
                   logs=[self._log("slurmctld.log")])

    def as_user(self, user: str, *argv: str, timeout: float = 30.0,
                check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client (`sbatch`, `srun`, `squeue`…) as unix user `user`.

        setpriv switches uid, gid and supplementary groups; the environment carries
        SLURM_CONF and the shim, and HOME points somewhere harmless.
        """
        if user == "root":
            return self._client(argv, check=check, timeout=timeout)
        entry = ensure_unix_user(user)
        group = grp.getgrgid(entry.pw_gid).gr_name
        wrapped = ["setpriv", f"--reuid={user}", f"--regid={group}", "--init-groups",
                   "env", "HOME=/tmp", *argv]
        return self._client(wrapped, check=check, timeout=timeout)

    def scontrol(self, *args: str) -> str:
        return self._client(["scontrol", *args]).stdout

    def squeue(self, *args: str) -> str:
        return self._client(["squeue", *args]).stdout

    def sacct(self, *args: str) -> str:
        return self._client(["sacct", *args]).stdout

    def submit(self, user: str, *args: str, wrap: str = "sleep 1") -> Submitted:
        """`sbatch --parsable` as `user`; short --time so backfill fits the job in.

        Pass extra sbatch flags in `args` (`-A lab`, `-p gpu`, `--qos q`, `--gres …`).
        """
        argv = ["sbatch", "--parsable", "--time=1", "-o", f"{self.base}/jobs/%j.out",
                f"--chdir={self.base}/jobs", *args, "--wrap", wrap]
        result = self.as_user(user, *argv)
        return Submitted(result.returncode, result.stdout, result.stderr)

    def srun(self, user: str, *args: str, command: Sequence[str] = ("hostname",),
             timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """`srun` as `user` (runs the command to the end; rc 0 means Slurm ran it)."""
        return self.as_user(user, "srun", "--time=1", f"--chdir={self.base}/jobs", *args,
                            *command, timeout=timeout)

    def job(self, job_id: str) -> JobState:
        """The job as slurmctld holds it (MinJobAge=300 keeps finished jobs visible)."""
        out = self._client(["scontrol", "-o", "show", "job", job_id], check=False).stdout
        fields = dict(w.split("=", 1) for w in out.split() if "=" in w)
        return JobState(job_id, fields.get("JobState", "UNKNOWN"), fields.get("Reason", ""),
                        fields.get("Account", ""), fields.get("QOS", ""))

    def wait_job(self, job_id: str, predicate: str | frozenset[str], *,
                 timeout: float = 20.0) -> JobState:
        """Wait until the job's state is one of `predicate` (a state or a set); return it."""
        wanted = frozenset({predicate}) if isinstance(predicate, str) else predicate
        seen: list[JobState] = []

        def reached() -> bool:
            seen[:] = [self.job(job_id)]
            return seen[0].state in wanted

        self._wait(reached, timeout, f"job {job_id} to reach {sorted(wanted)}",
                   lambda: f"last: {seen[0] if seen else None}")
        return seen[0]

    def wait_started(self, job_id: str, *, timeout: float = 20.0) -> JobState:
        """Wait until the job runs (or already ran to completion)."""
        return self.wait_job(job_id, STARTED, timeout=timeout)

    def wait_finished(self, job_id: str, *, timeout: float = 30.0) -> JobState:
        return self.wait_job(job_id, FINISHED, timeout=timeout)

    def wait_pending_reason(self, job_id: str, *, timeout: float = 20.0) -> JobState:
        """Wait until the scheduler has looked at a pending job (Reason no longer None).

        Raises if the job starts instead: the caller expected it to be held.
        """
        seen: list[JobState] = []

        def judged() -> bool:
            seen[:] = [self.job(job_id)]
            if seen[0].state in STARTED:
                raise ServiceError(f"job {job_id} started; expected it to stay pending")
            return seen[0].state == "PENDING" and seen[0].reason not in ("", "None")

        self._wait(judged, timeout, f"a pending reason for job {job_id}",
                   lambda: f"last: {seen[0] if seen else None}")
        return seen[0]

    def stays_pending(self, job_id: str, seconds: float = 4.0) -> JobState:
        """Assert-style helper: the job is still PENDING after `seconds` (several passes)."""
        deadline = time.monotonic() + seconds
        state = self.job(job_id)
        while time.monotonic() < deadline:
            state = self.job(job_id)
            if state.state != "PENDING":
                raise ServiceError(f"job {job_id} left PENDING: {state}")
            time.sleep(0.2)
        return state

    def cancel_all(self) -> None:
        """Cancel every job (tests call it to leave the one node free for the next).

        Sets `quiet_since`: the next whole second after the last job left, so every job
        that ran before (another module's too: the session shares the cluster) ended
        before it in sacct's whole seconds. A test that counts the jobs of a time window
        starts the window there."""
        # %F: an array's own id (a pending array prints as 3_[0-12:4%2], which scancel
        # cannot read; its id cancels every element)
        ids = sorted(set(self._client(["squeue", "-h", "-o", "%F"], check=False).stdout.split()))
        if ids:
            self._client(["scancel", *ids], check=False)
            self._wait(lambda: not self._client(["squeue", "-h", "-t", "R,CG", "-o", "%i"],
                                                check=False).stdout.split(),
                       20.0, "cancelled jobs to leave the node", lambda: "")
        self.quiet_since = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)

    def reset(self) -> None:
        """Back to a fresh cluster: no jobs, the node up, only root's account and user,
        only QOS normal.

        The session shares one cluster: the `slurm_cluster` fixture resets it when a test
        module starts, and live tests start from here too (unix users and their uids stay,
        which is what slurmctld keys users by anyway). Users are removed first and
        outright: slurmdbd refuses to remove an account that is still a user's default
        ("You can not remove the default account of a user")."""
        self.cancel_all()
        self.resume_node()
        self.clear_enforcement_state()
        if users := self._names("user", "root"):
            self.sacctmgr("-i", "remove", "user", "where", f"name={','.join(users)}")
        if accounts := self._names("account", "root"):
            self.sacctmgr("-i", "remove", "account", "where", f"name={','.join(accounts)}")
        if qos := self._names("qos", "normal"):
            self.sacctmgr("-i", "remove", "qos", "where", f"name={','.join(qos)}")

    def _names(self, entity: str, keep: str) -> list[str]:
        """Every `entity` (user, account, qos) slurmdbd holds, but `keep`."""
        field = "name" if entity == "qos" else entity
        out = self.sacctmgr("-i", "-P", "-n", "show", entity, f"format={field}").stdout
        return sorted({n for n in out.split() if n and n != keep})

    def resume_node(self) -> None:
        """Resume the node if a test left it drained or down (jobs would never start)."""
        def state() -> str:  # without sinfo's flags: `idle*` is idle, not yet responding
            out = self._client(["sinfo", "-h", "-n", "localhost", "-o", "%T"], check=False)
            return (out.stdout.split() or ["unknown"])[0].rstrip("*~#!%$@^-+")

        unavailable = ("drain", "down", "fail")
        if not state().startswith(unavailable):
            return
        self.scontrol("update", "nodename=localhost", "state=resume")
        self._wait(lambda: not state().startswith(unavailable), 20.0,
                   "the node to be resumed", lambda: f"state: {state()}")

    def assoc_mgr(self, *users: str) -> str:
        """What slurmctld holds for `users` (`scontrol show assoc_mgr … flags=assoc`)."""
        return self.scontrol("show", "assoc_mgr", f"users={','.join(users)}", "flags=assoc")

    def _wait(self, predicate: Callable[[], bool], timeout: float, what: str,
              detail: Callable[[], str]) -> None:
        _wait_for(predicate, timeout, what, logs=[self._log("slurmctld.log")],
                  interval=0.1, detail=detail)


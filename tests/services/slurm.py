"""Slurm accounting for tests: munged + a private MariaDB + slurmdbd, without slurmctld.

sacctmgr only talks to slurmdbd, so this is all the app's Slurm sync needs. Everything
lives under one throwaway directory and binds to 127.0.0.1 on free ports; the system
MariaDB (3306) and munge socket (/run/munge) are never used.

Usage::

    with SlurmAccounting() as slurm:
        slurm.add_cluster("farm")
        slurm.sacctmgr("-i", "add", "account", "physics", "cluster=farm")
        subprocess.run(["sacctmgr", "show", "assoc"], env={**os.environ, **slurm.env})
"""

from __future__ import annotations

import atexit
import hashlib
import os
import pwd
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

from ._proc import (
    ServiceError,
    StepTimer,
    ensure_running,
    free_ports,
    kill_procs,
    port_open,
    retry_port_clash,
    run,
    spawn,
    wait_for,
)

__all__ = ["SLURM_DB", "SlurmAccounting", "build_nodelay_shim"]

SLURM_DB = "slurm_acct_db"
_DB_USER = "slurm"
_DB_PASSWORD = "slurmpw"  # loopback-only throwaway database
_SHIM_SOURCE = Path(__file__).with_name("nodelay.c")
_TRES_PART = re.compile(r"^[A-Za-z0-9_.:/+-]+$")
_SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes including the NUL


def _default_cache() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "cheeto-like-test-services"


def build_nodelay_shim(cache_dir: Path | None = None) -> Path:
    """Compile nodelay.c (once per source version) and return the .so path.

    Cached by content hash so sessions after the first skip gcc; written via a
    temporary name + rename so concurrent sessions never load a half-written file.
    """
    source = _SHIM_SOURCE.read_bytes()
    cache = cache_dir or _default_cache()
    target = cache / f"libnodelay-{hashlib.sha256(source).hexdigest()[:16]}.so"
    if target.is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(partial), str(_SHIM_SOURCE), "-ldl"])
    os.replace(partial, target)
    return target


class SlurmAccounting:
    """A throwaway slurmdbd that sacctmgr can administer; see the module docstring.

    After start(): `env` holds SLURM_CONF and LD_PRELOAD for sacctmgr subprocesses,
    `clusters` lists clusters added through add_cluster(), `timings`/`startup_seconds`
    record the bring-up cost.
    """

    def __init__(
        self,
        base_dir: Path | None = None,
        *,
        cluster_name: str = "farm",
        startup_timeout: float = 15.0,
        default_tres: tuple[tuple[str, str], ...] = (("gres", "gpu"),),
        nodelay: bool = True,
        shim_cache: Path | None = None,
    ) -> None:
        """`base_dir` is a parent directory; a fresh subdirectory of it becomes BASE.

        `cluster_name` only fills ClusterName in slurm.conf (sacctmgr insists on one);
        clusters exist in slurmdbd only after add_cluster(). `default_tres` rows are
        inserted into tres_table at start, because without slurmctld nothing registers
        gres TRES and `GrpTRES=gres/gpu=2` would be rejected.
        """
        self._parent = base_dir
        self.cluster_name = cluster_name
        self.startup_timeout = startup_timeout
        self.default_tres = default_tres
        self.nodelay = nodelay
        self._shim_cache = shim_cache
        self.run_user = pwd.getpwuid(os.getuid()).pw_name
        self.base = Path()
        self.db_port = 0
        self.dbd_port = 0
        self.shim: Path | None = None
        self.env: dict[str, str] = {}
        self.clusters: list[str] = []
        self.timings: dict[str, float] = {}
        self.startup_seconds = 0.0
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    # ------------------------------------------------------------ paths

    @property
    def slurm_conf(self) -> Path:
        """slurm.conf for clients; slurmdbd finds slurmdbd.conf beside it."""
        return self.base / "etc" / "slurm.conf"

    @property
    def slurmdbd_conf(self) -> Path:
        return self.base / "etc" / "slurmdbd.conf"

    @property
    def munge_socket(self) -> Path:
        return self.base / "munge" / "munge.sock"

    @property
    def mysql_socket(self) -> Path:
        return self.base / "mysql.sock"

    @property
    def log_dir(self) -> Path:
        return self.base / "log"

    def _log(self, name: str) -> Path:
        return self.log_dir / name

    # ------------------------------------------------------------ lifecycle

    def start(self, attempts: int = 3) -> SlurmAccounting:
        """Bring up munged, MariaDB and slurmdbd; raise ServiceError (with logs) on failure.

        A start that lost a port race to another process is retried on fresh ports.
        """
        return retry_port_clash(self._start_once, attempts)

    def _start_once(self) -> SlurmAccounting:
        timer = StepTimer()
        self.base = self._make_base()
        atexit.register(self.stop)
        try:
            self._prepare_dirs()
            self.db_port, self.dbd_port = free_ports(2)
            self._start_munged(timer)
            self._start_mariadb(timer)
            self._build_shim(timer)
            self._write_configs()
            self._start_slurmdbd(timer)
            for tres_type, name in self.default_tres:
                self.add_tres(tres_type, name)
            timer.mark("default TRES inserted")
            self._start_cluster(timer)
        except BaseException:
            self.stop()
            raise
        self.timings = timer.steps
        self.startup_seconds = timer.elapsed
        return self

    def stop(self) -> None:
        """SIGKILL every daemon and delete BASE (graceful stops cost ~3.5 s for nothing)."""
        procs = reversed(list(self._procs.values()))
        self._procs.clear()
        try:
            kill_procs(procs)
        finally:
            if self.base.is_absolute():  # Path() until start() made BASE
                shutil.rmtree(self.base, ignore_errors=True)
            atexit.unregister(self.stop)

    def reset(self) -> None:
        """Back to a just-started slurmdbd: no clusters, accounts, users, QOS or jobs, only
        the default TRES.

        The session shares one slurmdbd and every module starts from here (the
        `slurm_accounting` fixture). slurmdbd is stopped and restarted on an empty
        database rather than cleaned through sacctmgr: a removal only marks rows deleted
        once jobs refer to them (a re-added account would come back with its old id),
        and TRES, transactions and drift made with `sql()` would survive. munged and
        MariaDB keep running, so this costs a fraction of a start.
        """
        if proc := self._procs.pop("slurmdbd", None):
            kill_procs([proc])  # SIGKILL also ends one a failed test left frozen (SIGSTOP)
        self.sql(f"DROP DATABASE IF EXISTS {SLURM_DB};CREATE DATABASE {SLURM_DB};", database="")
        self.clusters.clear()
        self._start_slurmdbd(StepTimer())
        for tres_type, name in self.default_tres:
            self.add_tres(tres_type, name)

    def __enter__(self) -> SlurmAccounting:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------ bring-up steps
    # _make_base, _slurm_conf_text and _start_cluster are the hooks SlurmCluster
    # (slurm_cluster.py) extends to add slurmctld + slurmd.

    def _make_base(self) -> Path:
        return Path(tempfile.mkdtemp(prefix="slurm-", dir=self._parent))

    def _start_cluster(self, timer: StepTimer) -> None:
        """Nothing here: accounting only. SlurmCluster starts slurmctld and slurmd."""

    def _prepare_dirs(self) -> None:
        for sub in ("munge", "mysql", "etc", "log", "lib"):
            (self.base / sub).mkdir()
        (self.base / "munge").chmod(0o700)  # munged refuses an insecure key directory
        for sock in (self.munge_socket, self.mysql_socket):
            if len(str(sock)) > _SUN_PATH_MAX:
                raise ServiceError(f"socket path too long for AF_UNIX ({len(str(sock))}): {sock}")

    def _start_munged(self, timer: StepTimer) -> None:
        munge_dir = self.base / "munge"
        key = munge_dir / "munge.key"
        run(["mungekey", "--create", f"--keyfile={key}", "--force"])
        argv = [
            "munged", "--foreground", "--force",
            f"--socket={self.munge_socket}", f"--key-file={key}",
            f"--pid-file={munge_dir / 'munged.pid'}", f"--seed-file={munge_dir / 'munged.seed'}",
            f"--log-file={self._log('munged.log')}",
        ]  # fmt: skip
        proc = spawn(argv, log=self._log("munged.out"), cwd=self.base)
        self._procs["munged"] = proc
        logs = [self._log("munged.out"), self._log("munged.log")]

        def ready() -> bool:
            ensure_running(proc, "munged", logs)
            return self.munge_socket.exists()

        wait_for(ready, self.startup_timeout, "munged socket", logs=logs)
        cred = run(["munge", "-n", "-S", str(self.munge_socket)], logs=logs).stdout
        run(["unmunge", "-S", str(self.munge_socket)], input=cred, logs=logs)
        timer.mark("munged up (round-trip ok)")

    def _mysql_options(self) -> list[str]:
        return [
            "--no-defaults", f"--datadir={self.base / 'mysql'}", f"--socket={self.mysql_socket}",
            f"--port={self.db_port}", "--bind-address=127.0.0.1",
            f"--pid-file={self.base / 'mysql.pid'}", f"--log-error={self._log('mariadb.err')}",
            f"--user={self.run_user}", "--skip-name-resolve",
            # slurmdbd warns below these values; lock_wait_timeout matters for big rollups
            "--innodb-buffer-pool-size=64M", "--innodb-log-file-size=48M",
            "--innodb-lock-wait-timeout=900", "--max-allowed-packet=16M",
        ]  # fmt: skip

    def _start_mariadb(self, timer: StepTimer) -> None:
        install = [
            "mariadb-install-db", "--no-defaults", f"--datadir={self.base / 'mysql'}",
            f"--user={self.run_user}", "--auth-root-authentication-method=normal",
            "--skip-test-db", "--skip-name-resolve",
        ]  # fmt: skip
        run(install, timeout=120, logs=[self._log("install-db.log")])
        timer.mark("mariadb-install-db done")
        logs = [self._log("mariadbd.out"), self._log("mariadb.err")]
        proc = spawn(["mariadbd", *self._mysql_options()], log=logs[0], cwd=self.base)
        self._procs["mariadbd"] = proc
        ping = ["mariadb-admin", "--no-defaults", "-S", str(self.mysql_socket), "-uroot", "ping"]

        def ready() -> bool:
            ensure_running(proc, "mariadbd", logs)
            return run(ping, check=False, timeout=10).returncode == 0

        wait_for(ready, self.startup_timeout, "mariadbd to answer ping", logs=logs)
        timer.mark("mariadbd ready")
        grants = "".join(
            f"CREATE USER IF NOT EXISTS '{_DB_USER}'@'{host}' IDENTIFIED BY '{_DB_PASSWORD}';"
            f"GRANT ALL ON {SLURM_DB}.* TO '{_DB_USER}'@'{host}';"
            for host in ("127.0.0.1", "localhost")
        )
        self.sql(f"CREATE DATABASE IF NOT EXISTS {SLURM_DB};{grants}FLUSH PRIVILEGES;", database="")
        timer.mark("database + user created")

    def _build_shim(self, timer: StepTimer) -> None:
        if not self.nodelay:
            return
        try:
            self.shim = build_nodelay_shim(self._shim_cache)
        except OSError:  # unwritable cache (e.g. HOME of an unprivileged user): build locally
            self.shim = build_nodelay_shim(self.base / "lib")
        timer.mark("TCP_NODELAY shim ready")

    def _slurm_conf_text(self) -> str:
        sock = self.munge_socket
        return (
            f"ClusterName={self.cluster_name}\n"
            "SlurmctldHost=localhost\n"  # sacctmgr is fatal without one; nothing runs there
            f"SlurmUser={self.run_user}\n"
            "AuthType=auth/munge\n"
            f"AuthInfo=socket={sock}\n"
            "AccountingStorageType=accounting_storage/slurmdbd\n"
            "AccountingStorageHost=127.0.0.1\n"
            f"AccountingStoragePort={self.dbd_port}\n"
            # client->slurmdbd connections take the munge socket from here, not AuthInfo
            f"AccountingStoragePass={sock}\n"
            "AccountingStorageTRES=gres/gpu\n"
            "GresTypes=gpu\n"
        )

    def _write_configs(self) -> None:
        self.slurm_conf.write_text(self._slurm_conf_text())
        # slurmdbd is fatal unless this file is 0600 and owned by SlurmUser: create it so.
        fd = os.open(self.slurmdbd_conf, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as conf:
            conf.write(self._slurmdbd_conf_text())
        self.env = {"SLURM_CONF": str(self.slurm_conf)}
        if self.shim:
            self.env["LD_PRELOAD"] = str(self.shim)

    def _slurmdbd_conf_text(self) -> str:
        return (
            "AuthType=auth/munge\n"
            f"AuthInfo=socket={self.munge_socket}\n"
            "DbdHost=localhost\n"
            "DbdAddr=127.0.0.1\n"
            "CommunicationParameters=NoInAddrAny\n"  # else slurmdbd listens on 0.0.0.0
            f"DbdPort={self.dbd_port}\n"
            f"SlurmUser={self.run_user}\n"
            "DebugLevel=info\n"
            f"LogFile={self._log('slurmdbd.log')}\n"
            f"PidFile={self.base / 'slurmdbd.pid'}\n"
            "StorageType=accounting_storage/mysql\n"
            "StorageHost=127.0.0.1\n"
            f"StoragePort={self.db_port}\n"
            f"StorageUser={_DB_USER}\n"
            f"StoragePass={_DB_PASSWORD}\n"
            f"StorageLoc={SLURM_DB}\n"
        )

    def _start_slurmdbd(self, timer: StepTimer) -> None:
        logs = [self._log("slurmdbd.out"), self._log("slurmdbd.log")]
        proc = spawn(["slurmdbd", "-D", "-s"], log=logs[0], env=self.client_env(), cwd=self.base)
        self._procs["slurmdbd"] = proc

        def listening() -> bool:
            ensure_running(proc, "slurmdbd", logs)
            return port_open(self.dbd_port)

        wait_for(listening, self.startup_timeout, f"slurmdbd on port {self.dbd_port}", logs=logs)
        timer.mark("slurmdbd listening")

        last: list[subprocess.CompletedProcess[str]] = []

        def answering() -> bool:
            ensure_running(proc, "slurmdbd", logs)
            last[:] = [self.sacctmgr("-n", "-P", "show", "cluster", check=False)]
            return last[0].returncode == 0

        def last_error() -> str:
            return f"last sacctmgr stderr: {last[0].stderr.strip()}" if last else ""

        wait_for(
            answering,
            self.startup_timeout,
            "sacctmgr to reach slurmdbd",
            logs=logs,
            detail=last_error,
        )
        timer.mark("slurmdbd answering sacctmgr")

    # ------------------------------------------------------------ client helpers

    @property
    def slurmdbd_pid(self) -> int:
        """For tests that freeze slurmdbd (SIGSTOP) to see a hanging sacctmgr."""
        return self._procs["slurmdbd"].pid

    def client_env(self) -> dict[str, str]:
        """The current environment plus `env`: what a sacctmgr subprocess should get."""
        return {**os.environ, **self.env}

    def sacctmgr(
        self, *args: str, check: bool = True, timeout: float = 30.0
    ) -> subprocess.CompletedProcess[str]:
        """Run `sacctmgr *args` against this slurmdbd.

        With `check`, a non-zero exit raises ServiceError carrying stdout/stderr; pass
        check=False to inspect expected failures (e.g. rc=1 "Nothing deleted").
        """
        logs = [self._log("slurmdbd.log")]
        return run(
            ["sacctmgr", *args], env=self.client_env(), timeout=timeout, check=check, logs=logs
        )

    def add_cluster(self, name: str) -> None:
        """Register cluster `name` in slurmdbd (several clusters may share one slurmdbd)."""
        self.sacctmgr("-i", "add", "cluster", name)
        if name not in self.clusters:
            self.clusters.append(name)

    def sql(self, query: str, database: str = SLURM_DB) -> str:
        """Run SQL as MariaDB root over the socket; returns tab-separated rows, no header.

        Tests use it to create drift behind sacctmgr's back or to inspect tables.
        """
        argv = ["mariadb", "--no-defaults", "-S", str(self.mysql_socket), "-uroot", "-N", "-B"]
        if database:
            argv.append(database)
        logs = [self._log("mariadb.err")]
        return run(argv, input=query, timeout=60, logs=logs).stdout

    def add_tres(self, tres_type: str, name: str) -> int:
        """Register a TRES such as ("gres", "gpu:a100") and return its id.

        slurmctld normally does this at registration (AccountingStorageTRES); rows take
        effect in slurmdbd immediately. Idempotent thanks to tres_table's unique key.
        """
        for part in (tres_type, name):
            if not _TRES_PART.match(part):
                raise ValueError(f"unsafe TRES component: {part!r}")
        self.sql(
            "INSERT IGNORE INTO tres_table (creation_time, type, name) "
            f"VALUES (UNIX_TIMESTAMP(), '{tres_type}', '{name}');"
        )
        found = self.sql(f"SELECT id FROM tres_table WHERE type='{tres_type}' AND name='{name}';")
        return int(found.split()[0])

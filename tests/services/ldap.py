"""A throwaway OpenLDAP slapd (mdb + cn=config) with the schemas the app writes against.

Schemas: core, cosine, inetorgperson from /etc/ldap/schema plus our own rfc2307bis and
openssh-lpk (tests/services/schemas/; Debian ships neither). So the production object
class combinations are accepted: users `top, inetOrgPerson, posixAccount, ldapPublicKey,
shadowAccount`, groups `top, groupOfMembers, posixGroup`, and `automountMap`/`automount`.

Listens on 127.0.0.1 only: ldap:// (StartTLS), ldaps:// and an ldapi:// socket in BASE.
Bring-up order matters (see services.md): slapadd the base tree into a fresh mdb, then
slaptest converts slapd.conf into a cn=config directory, then `slapd -F` serves it.
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

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

__all__ = ["DEFAULT_SUFFIX", "SCHEMA_DIR", "Slapd", "ssha"]

DEFAULT_SUFFIX = "dc=hpc,dc=example,dc=org"
SCHEMA_DIR = Path(__file__).with_name("schemas")
_SYSTEM_SCHEMAS = ("core", "cosine", "inetorgperson")
_OUR_SCHEMAS = ("rfc2307bis", "openssh-lpk")
_SUN_PATH_MAX = 107


def ssha(password: str) -> str:
    """{SSHA} hash for slapd rootpw lines (avoids a slappasswd subprocess)."""
    salt = secrets.token_bytes(8)
    digest = hashlib.sha1(password.encode() + salt).digest()
    return "{SSHA}" + base64.b64encode(digest + salt).decode()


def _suffix_entry(suffix: str) -> str:
    """LDIF for the suffix entry itself; its class depends on the first RDN's type."""
    attr, _, value = suffix.split(",", 1)[0].partition("=")
    attr = attr.strip().lower()
    if attr == "dc":
        classes, extra = ("top", "dcObject", "organization"), f"dc: {value}\no: {value}\n"
    elif attr == "o":
        classes, extra = ("top", "organization"), f"o: {value}\n"
    elif attr == "ou":
        classes, extra = ("top", "organizationalUnit"), f"ou: {value}\n"
    else:
        raise ValueError(f"cannot build a suffix entry for {suffix!r} (use dc=, o= or ou=)")
    lines = "".join(f"objectClass: {c}\n" for c in classes)
    return f"dn: {suffix}\n{lines}{extra}"


def _dn_of(line: str) -> str:
    """The DN of an LDIF `dn:` line (`dn:: ` carries it base64-encoded: non-ASCII)."""
    if line.startswith("dn::"):
        return base64.b64decode(line[4:].strip()).decode()
    return line[3:].strip()


class Slapd:
    """Throwaway slapd; after start() connect with `uri` + `root_dn`/`root_password`.

    TLS clients need `ca_file` (or `env`, which sets LDAPTLS_CACERT for ldap-utils).
    `config_dn`/`config_password` bind to cn=config for runtime config changes; over
    `ldapi_uri`, SASL EXTERNAL as the current uid also manages cn=config.
    """

    config_dn = "cn=config"

    def __init__(
        self,
        base_dir: Path | None = None,
        *,
        suffix: str = DEFAULT_SUFFIX,
        root_password: str = "secret",
        config_password: str | None = None,
        organizational_units: Sequence[str] = ("people", "groups", "automount"),
        extra_schemas: Sequence[Path] = (),
        startup_timeout: float = 15.0,
    ) -> None:
        """`base_dir` is a parent directory; a fresh subdirectory of it becomes BASE.

        `organizational_units` become `ou=<name>,<suffix>` entries in the initial tree
        (the app creates its own per-site OUs, so pass () for only the suffix entry).
        """
        _suffix_entry(suffix)  # validate early, before anything is started
        self._parent = base_dir
        self.suffix = suffix
        self.root_dn = f"cn=admin,{suffix}"
        self.root_password = root_password
        self.config_password = config_password or root_password
        self.organizational_units = tuple(organizational_units)
        self.extra_schemas = tuple(Path(p) for p in extra_schemas)
        self.startup_timeout = startup_timeout
        self.base = Path()
        self.port = 0
        self.ldaps_port = 0
        self.timings: dict[str, float] = {}
        self.startup_seconds = 0.0
        self._proc: subprocess.Popen[bytes] | None = None

    # ------------------------------------------------------------ addresses

    @property
    def uri(self) -> str:
        """Plain LDAP (StartTLS-capable) URI."""
        return f"ldap://127.0.0.1:{self.port}"

    @property
    def ldaps_uri(self) -> str:
        return f"ldaps://127.0.0.1:{self.ldaps_port}"

    @property
    def ldapi_socket(self) -> Path:
        return self.base / "ldapi"

    @property
    def ldapi_uri(self) -> str:
        return "ldapi://" + quote(str(self.ldapi_socket), safe="")

    @property
    def ca_file(self) -> Path:
        """The self-signed server certificate, which is also its own CA."""
        return self.base / "tls" / "cert.pem"

    @property
    def env(self) -> dict[str, str]:
        """Variables that make ldap-utils (libldap) trust our certificate."""
        return {"LDAPTLS_CACERT": str(self.ca_file), "LDAPTLS_REQCERT": "demand"}

    @property
    def log_file(self) -> Path:
        return self.base / "slapd.log"

    # ------------------------------------------------------------ lifecycle

    def start(self, attempts: int = 3) -> Slapd:
        """Build the instance and start slapd; raise ServiceError (with logs) on failure.

        A start that lost a port race to another process is retried on fresh ports.
        """
        return retry_port_clash(self._start_once, attempts)

    def _start_once(self) -> Slapd:
        timer = StepTimer()
        self.base = Path(tempfile.mkdtemp(prefix="slapd-", dir=self._parent))
        atexit.register(self.stop)
        try:
            self._prepare_dirs()
            self.port, self.ldaps_port = free_ports(2)
            self._make_certificate()
            timer.mark("certificate generated")
            self._write_files()
            self._load_offline()
            timer.mark("slapadd + slaptest done")
            self._serve()
            timer.mark("slapd answering")
        except BaseException:
            self.stop()
            raise
        self.timings = timer.steps
        self.startup_seconds = timer.elapsed
        return self

    def stop(self) -> None:
        """Kill slapd and delete BASE (mdb needs no clean shutdown for a throwaway tree)."""
        procs = [self._proc] if self._proc else []
        self._proc = None
        try:
            kill_procs(procs)
        finally:
            if self.base.is_absolute():  # Path() until start() made BASE
                shutil.rmtree(self.base, ignore_errors=True)
            atexit.unregister(self.stop)

    def reset(self) -> None:
        """Back to the initial tree: the suffix entry and `organizational_units`, empty.

        The session shares one slapd and every module starts from here (the `slapd`
        fixture), so entries another module left (users in ou=people, per-site OUs, maps)
        are never seen. Tests leave cn=config alone; only the data tree is reset.
        """
        listing = self.ldapsearch(self.suffix, "(objectClass=*)", "1.1", scope="one")
        children = [_dn_of(line) for line in listing.splitlines() if line.startswith("dn:")]
        if children:  # the root DN is exempt from size limits, so -r reaches every entry
            self.ldap("ldapdelete", "-r", *children)
        if entries := self._ou_entries():
            self.ldapadd("\n".join(entries))

    def __enter__(self) -> Slapd:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------ bring-up steps

    def _prepare_dirs(self) -> None:
        for sub in ("data", "slapd.d", "tls"):
            (self.base / sub).mkdir()
        if len(str(self.ldapi_socket)) > _SUN_PATH_MAX:
            raise ServiceError(f"ldapi socket path too long for AF_UNIX: {self.ldapi_socket}")

    def _make_certificate(self) -> None:
        """Self-signed cert for 127.0.0.1/localhost; an EC key is ~10x faster than RSA."""
        tls = self.base / "tls"
        run([
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "7", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout", str(tls / "key.pem"), "-out", str(self.ca_file),
        ])  # fmt: skip

    def _schema_files(self) -> list[Path]:
        system = [Path("/etc/ldap/schema") / f"{name}.schema" for name in _SYSTEM_SCHEMAS]
        ours = [SCHEMA_DIR / f"{name}.schema" for name in _OUR_SCHEMAS]
        return [*system, *ours, *self.extra_schemas]

    def _slapd_conf(self) -> str:
        includes = "".join(f"include {path}\n" for path in self._schema_files())
        peer = f"gidNumber={os.getgid()}+uidNumber={os.getuid()},cn=peercred,cn=external,cn=auth"
        return f"""{includes}
pidfile {self.base / "slapd.pid"}
modulepath /usr/lib/ldap
moduleload back_mdb
TLSCertificateFile {self.ca_file}
TLSCertificateKeyFile {self.base / "tls" / "key.pem"}

database config
rootdn "{self.config_dn}"
rootpw {ssha(self.config_password)}
access to * by dn.exact="{peer}" manage by * break

database mdb
maxsize 104857600
suffix "{self.suffix}"
rootdn "{self.root_dn}"
rootpw {ssha(self.root_password)}
directory {self.base / "data"}
index objectClass eq
index uid,uidNumber,gidNumber,memberUid,member,cn,mail eq
index automountMapName,automountKey eq
access to attrs=userPassword
    by self write
    by anonymous auth
    by * none
access to *
    by * read
"""

    def _ou_entries(self) -> list[str]:
        return [
            f"dn: ou={ou},{self.suffix}\nobjectClass: top\nobjectClass: organizationalUnit\n"
            f"ou: {ou}\n"
            for ou in self.organizational_units
        ]

    def _base_ldif(self) -> str:
        return "\n".join([_suffix_entry(self.suffix), *self._ou_entries()])

    def _write_files(self) -> None:
        (self.base / "slapd.conf").write_text(self._slapd_conf())
        (self.base / "base.ldif").write_text(self._base_ldif())
        (self.base / "tls" / "key.pem").chmod(0o600)

    def _load_offline(self) -> None:
        """slapadd first (it creates the mdb), then slaptest writes cn=config.

        `slaptest -F` on an empty mdb fails, and `slaptest -u` silently writes nothing.
        """
        conf, config_dir = self.base / "slapd.conf", self.base / "slapd.d"
        run(["slapadd", "-q", "-f", str(conf), "-l", str(self.base / "base.ldif")])
        run(["slaptest", "-Q", "-f", str(conf), "-F", str(config_dir)])

    def _serve(self) -> None:
        urls = f"{self.uri}/ {self.ldaps_uri}/ {self.ldapi_uri}"
        # -d none: stay in the foreground (the pid is ours); only errors reach the log
        argv = ["slapd", "-F", str(self.base / "slapd.d"), "-h", urls, "-d", "none"]
        self._proc = proc = spawn(argv, log=self.log_file, cwd=self.base)
        logs = [self.log_file]

        def listening() -> bool:
            ensure_running(proc, "slapd", logs)
            return (
                port_open(self.port) and port_open(self.ldaps_port) and self.ldapi_socket.exists()
            )

        wait_for(listening, self.startup_timeout, "slapd listeners", logs=logs)
        self.ldap("ldapwhoami", logs=logs)  # proves the root bind works, not just the port

    # ------------------------------------------------------------ client helpers

    def client_env(self) -> dict[str, str]:
        """The current environment plus `env`, for ldap-utils subprocesses."""
        return {**os.environ, **self.env}

    def ldap(
        self,
        tool: str,
        *args: str,
        input: str | None = None,
        check: bool = True,
        logs: Sequence[Path] = (),
    ) -> subprocess.CompletedProcess[str]:
        """Run an ldap-utils `tool` (ldapadd, ldapsearch, ...) as the root DN over `uri`."""
        argv = [tool, "-x", "-H", self.uri, "-D", self.root_dn, "-w", self.root_password, *args]
        return run(argv, env=self.client_env(), input=input, check=check, logs=logs)

    def ldapadd(self, ldif: str) -> None:
        """Add the entries in `ldif` as the root DN; ServiceError on any rejection."""
        self.ldap("ldapadd", input=ldif)

    def ldapmodify(self, ldif: str) -> None:
        """Apply a changetype LDIF as the root DN."""
        self.ldap("ldapmodify", input=ldif)

    def ldapsearch(
        self, base: str, filter: str = "(objectClass=*)", *attrs: str, scope: str = "sub"
    ) -> str:
        """LDIF (-LLL, unwrapped) of a search as the root DN."""
        args = ["-LLL", "-o", "ldif-wrap=no", "-s", scope, "-b", base, filter, *attrs]
        return self.ldap("ldapsearch", *args).stdout

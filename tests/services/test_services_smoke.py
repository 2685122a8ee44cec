"""Smoke tests: each harness service does what the app's sync code will rely on.

Stdlib + pytest only. The fixtures come from tests/services/fixtures.py (a plugin); the
services are shared by this module's tests, so every test uses its own names (clusters,
uids, maps).
"""

from __future__ import annotations

import ctypes
import os
import re
import socket
import struct
import subprocess
from pathlib import Path

from .ldap import Slapd
from .rabbitmq import RabbitMQ
from .slurm import SlurmAccounting

Proc = subprocess.CompletedProcess[str]

# ------------------------------------------------------------------ Slurm accounting

ASSOC_FORMAT = "cluster,account,user,partition,qos,defaultqos"


def _assocs(slurm: SlurmAccounting, cluster: str) -> list[tuple[str, ...]]:
    """Associations of `cluster` as tuples in ASSOC_FORMAT order (parsable output)."""
    out = slurm.sacctmgr(
        "show", "assoc", f"format={ASSOC_FORMAT}", "-P", "-n", f"cluster={cluster}"
    ).stdout
    return [tuple(line.split("|")) for line in out.splitlines() if line]


def test_slurm_env_points_sacctmgr_at_our_slurmdbd(slurm_accounting: SlurmAccounting) -> None:
    env = slurm_accounting.env
    assert Path(env["SLURM_CONF"]).is_file()
    assert Path(env["LD_PRELOAD"]).is_file()
    config = subprocess.run(
        ["sacctmgr", "-n", "-P", "show", "configuration"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert re.search(rf"^AccountingStoragePort\s*=\s*{slurm_accounting.dbd_port}$", config, re.M)


def test_slurm_associations_per_cluster(slurm_accounting: SlurmAccounting) -> None:
    slurm = slurm_accounting
    slurm.add_cluster("alpha")
    slurm.add_cluster("beta")
    assert {"alpha", "beta"} <= set(slurm.clusters)
    slurm.sacctmgr("-i", "add", "account", "physics", "Description=physics", "cluster=alpha")
    slurm.sacctmgr(
        "-i", "add", "user", "alice", "account=physics", "partition=gpu", "cluster=alpha"
    )
    slurm.sacctmgr(
        "-i", "add", "user", "alice", "account=physics", "partition=cpu", "cluster=alpha"
    )

    alpha = _assocs(slurm, "alpha")
    assert ("alpha", "physics", "alice", "gpu", "normal", "") in alpha
    assert ("alpha", "physics", "alice", "cpu", "normal", "") in alpha
    assert not [row for row in _assocs(slurm, "beta") if row[1] == "physics"]

    slurm.sacctmgr("-i", "delete", "user", "alice", "where", "cluster=alpha", "partition=cpu")
    users = {(row[2], row[3]) for row in _assocs(slurm, "alpha") if row[2]}
    assert ("alice", "gpu") in users
    assert ("alice", "cpu") not in users
    # deleting what is already gone: rc=1 "Nothing deleted" (the app must tolerate it)
    again = slurm.sacctmgr(
        "-i", "delete", "user", "alice", "where", "cluster=alpha", "partition=cpu", check=False
    )
    assert again.returncode == 1
    assert "Nothing deleted" in again.stdout


def test_slurm_qos_with_gpu_tres(slurm_accounting: SlurmAccounting) -> None:
    slurm = slurm_accounting
    limits = "GrpTRES=cpu=10,mem=100G,gres/gpu=2 MaxTRESPerUser=cpu=4,gres/gpu=1"
    slurm.sacctmgr("-i", "add", "qos", "gpu_limited", *limits.split())
    rows = slurm.sacctmgr("-P", "-n", "show", "qos", "format=name,grptres,maxtrespu").stdout
    assert "gpu_limited|cpu=10,gres/gpu=2,mem=100G|cpu=4,gres/gpu=1" in rows.splitlines()
    slurm.sacctmgr("-i", "delete", "qos", "gpu_limited")
    assert "gpu_limited" not in slurm.sacctmgr("-P", "-n", "show", "qos", "format=name").stdout


def test_slurm_add_tres_enables_typed_gres(slurm_accounting: SlurmAccounting) -> None:
    slurm = slurm_accounting
    rejected = slurm.sacctmgr(
        "-i", "add", "qos", "h100_only", "GrpTRES=gres/gpu:h100=1", check=False
    )
    assert rejected.returncode != 0
    tres_id = slurm.add_tres("gres", "gpu:h100")
    assert tres_id > 1000
    assert slurm.add_tres("gres", "gpu:h100") == tres_id  # idempotent
    slurm.sacctmgr("-i", "add", "qos", "h100_only", "GrpTRES=gres/gpu:h100=1")
    slurm.sacctmgr("-i", "delete", "qos", "h100_only")


def test_slurm_sql_sees_and_changes_the_accounting_db(slurm_accounting: SlurmAccounting) -> None:
    slurm = slurm_accounting
    slurm.add_cluster("gamma")
    slurm.sacctmgr("-i", "add", "account", "chem", "Description=chemistry", "cluster=gamma")
    assert "gamma" in slurm.sql("SELECT name FROM cluster_table WHERE deleted=0;").split()
    # drift made behind sacctmgr's back, as reconciliation tests will do
    slurm.sql("UPDATE acct_table SET description='drifted' WHERE name='chem';")
    show = slurm.sacctmgr("-P", "-n", "show", "account", "chem", "format=account,descr").stdout
    assert show.strip() == "chem|drifted"


# ------------------------------------------------------------------ OpenLDAP


def yescrypt(password: str) -> str:
    """`{CRYPT}$y$...` as the app stores it, via the system libxcrypt (crypt module is gone)."""
    lib = ctypes.CDLL("libcrypt.so.1")
    lib.crypt_gensalt.restype = ctypes.c_char_p
    lib.crypt_gensalt.argtypes = [ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_int]
    lib.crypt.restype = ctypes.c_char_p
    lib.crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    salt = lib.crypt_gensalt(b"$y$", 0, None, 0)
    hashed = lib.crypt(password.encode(), salt)
    assert hashed and hashed.startswith(b"$y$")
    return "{CRYPT}" + hashed.decode()


def _ldap(slapd: Slapd, cmdline: str, env: dict[str, str] | None = None) -> Proc:
    """Run an ldap-utils command line (split on spaces) with our CA trusted by default."""
    return subprocess.run(
        cmdline.split(),
        env={**os.environ, **(env or slapd.env)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def _user_ldif(slapd: Slapd, uid: str, uid_number: int, password_hash: str) -> str:
    return f"""dn: uid={uid},ou=people,{slapd.suffix}
objectClass: top
objectClass: inetOrgPerson
objectClass: posixAccount
objectClass: ldapPublicKey
objectClass: shadowAccount
uid: {uid}
cn: {uid.title()} Example
sn: Example
mail: {uid}@example.org
uidNumber: {uid_number}
gidNumber: {uid_number}
homeDirectory: /home/{uid}
loginShell: /bin/bash
sshPublicKey: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4 {uid}
userPassword: {password_hash}
"""


def test_ldap_user_with_yescrypt_password_can_bind(slapd: Slapd) -> None:
    slapd.ldapadd(_user_ldif(slapd, "alice", 10001, yescrypt("alice-pw")))
    dn = f"uid=alice,ou=people,{slapd.suffix}"

    whoami = _ldap(slapd, f"ldapwhoami -x -H {slapd.uri} -D {dn} -w alice-pw")
    assert whoami.returncode == 0, whoami.stderr
    assert whoami.stdout.strip() == f"dn:{dn}"
    wrong = _ldap(slapd, f"ldapwhoami -x -H {slapd.uri} -D {dn} -w nope")
    assert wrong.returncode == 49  # invalidCredentials

    # userPassword is auth-only for others; the rest of the entry is readable anonymously
    read = f"ldapsearch -x -LLL -H {slapd.uri} -b {dn} -s base userPassword sshPublicKey"
    anon = _ldap(slapd, read)
    assert "sshPublicKey: ssh-ed25519" in anon.stdout
    assert "userPassword" not in anon.stdout
    own = _ldap(slapd, read.replace(" -b ", f" -D {dn} -w alice-pw -b "))
    assert "userPassword::" in own.stdout  # self may read (and write) it


def test_ldap_group_of_members_with_posix_group(slapd: Slapd) -> None:
    slapd.ldapadd(_user_ldif(slapd, "bob", 10002, yescrypt("bob-pw")))
    member = f"uid=bob,ou=people,{slapd.suffix}"
    slapd.ldapadd(f"""dn: cn=physics,ou=groups,{slapd.suffix}
objectClass: top
objectClass: groupOfMembers
objectClass: posixGroup
cn: physics
gidNumber: 20001
memberUid: bob
member: {member}
""")
    by_uid = slapd.ldapsearch(f"ou=groups,{slapd.suffix}", "(memberUid=bob)", "cn")
    by_dn = slapd.ldapsearch(f"ou=groups,{slapd.suffix}", f"(member={member})", "gidNumber")
    assert "cn: physics" in by_uid
    assert "gidNumber: 20001" in by_dn


def test_ldap_automount_map_and_entry(slapd: Slapd) -> None:
    maps = f"ou=automount,{slapd.suffix}"
    slapd.ldapadd(f"""dn: automountMapName=auto.home,{maps}
objectClass: top
objectClass: automountMap
automountMapName: auto.home

dn: automountKey=alice,automountMapName=auto.home,{maps}
objectClass: top
objectClass: automount
automountKey: alice
automountInformation: -rw,soft nfs01:/export/home/alice
""")
    found = slapd.ldapsearch(
        maps, "(&(objectClass=automount)(automountKey=alice))", "automountInformation"
    )
    assert "automountInformation: -rw,soft nfs01:/export/home/alice" in found


def test_ldap_tls_is_verified_with_our_ca(slapd: Slapd) -> None:
    starttls = _ldap(slapd, f"ldapwhoami -x -ZZ -H {slapd.uri}")
    assert starttls.returncode == 0, starttls.stderr
    ldaps = _ldap(slapd, f"ldapwhoami -x -H {slapd.ldaps_uri}")
    assert ldaps.returncode == 0, ldaps.stderr
    system_cas = {
        "LDAPTLS_CACERT": "/etc/ssl/certs/ca-certificates.crt",
        "LDAPTLS_REQCERT": "demand",
    }
    untrusted = _ldap(slapd, f"ldapwhoami -x -ZZ -H {slapd.uri}", env=system_cas)
    assert untrusted.returncode != 0  # proves the check is real, not skipped


def test_ldap_cn_config_reachable(slapd: Slapd) -> None:
    search = f"-LLL -H {slapd.ldapi_uri} -b cn=config (olcSuffix=*) olcSuffix"
    expected = f"olcSuffix: {slapd.suffix}"
    by_password = _ldap(
        slapd, f"ldapsearch -x -D {slapd.config_dn} -w {slapd.config_password} {search}"
    )
    assert expected in by_password.stdout, by_password.stderr
    external = _ldap(slapd, f"ldapsearch -Y EXTERNAL {search}")  # SASL as our own uid
    assert expected in external.stdout, external.stderr


# ------------------------------------------------------------------ RabbitMQ


def _amqp_connection_start(port: int) -> bytes:
    """Send the AMQP 0-9-1 protocol header and return the broker's first frame payload."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"AMQP\x00\x00\x09\x01")
        header = conn.recv(7, socket.MSG_WAITALL)
        frame_type, channel, size = struct.unpack(">BHI", header)
        assert (frame_type, channel) == (1, 0)  # method frame on channel 0
        return conn.recv(size, socket.MSG_WAITALL)


def test_rabbitmq_speaks_amqp_and_offers_plain_login(rabbitmq: RabbitMQ) -> None:
    payload = _amqp_connection_start(rabbitmq.port)
    class_id, method_id, major, minor = struct.unpack(">HHBB", payload[:6])
    assert (class_id, method_id, major, minor) == (10, 10, 0, 9)  # connection.start, 0-9-1
    assert b"PLAIN" in payload
    assert rabbitmq.url == f"amqp://guest:guest@127.0.0.1:{rabbitmq.port}//"


def test_rabbitmq_is_our_own_node(rabbitmq: RabbitMQ) -> None:
    status = rabbitmq.rabbitmqctl("status").stdout
    assert rabbitmq.node_name in status
    users = rabbitmq.rabbitmqctl("list_users", "-q").stdout
    assert "guest" in users
    rabbitmq.rabbitmqctl("add_vhost", "smoke")
    assert "smoke" in rabbitmq.rabbitmqctl("list_vhosts", "-q").stdout.split()


# ------------------------------------------------------------------ all together


def test_all_services_run_side_by_side(
    slurm_accounting: SlurmAccounting, slapd: Slapd, rabbitmq: RabbitMQ
) -> None:
    ports = [
        slurm_accounting.db_port,
        slurm_accounting.dbd_port,
        slapd.port,
        slapd.ldaps_port,
        rabbitmq.port,
        rabbitmq.dist_port,
        rabbitmq.epmd_port,
    ]
    assert len(set(ports)) == len(ports)
    assert not {3306, 5672, 4369, 389, 636} & set(ports)  # never the system instances'
    for base in (slurm_accounting.base, slapd.base, rabbitmq.base):
        assert base.is_dir()
        assert not str(base).startswith(("/var/", "/etc/", "/run/"))

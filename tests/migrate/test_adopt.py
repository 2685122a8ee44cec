"""``cheeto ng site adopt``: a cluster that a person set up by hand (sacctmgr commands
and LDIF typed in, nothing from this project) is adopted, and then the first ``ng slurm
sync`` and ``ng ldap sync-site --dry-run --full`` plan nothing at all. Conflicts are
reported and refuse the write; a second adopt is a no-op."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from cheeto_like.models import (
    AutomountMap,
    Group,
    GroupMembership,
    History,
    SlurmAccount,
    SlurmAllocation,
    SlurmAssociation,
    SlurmQOS,
    SshKey,
    Storage,
    StorageVolume,
    User,
    UserSiteInfo,
)
from tests.factories import ED25519_KEY, ED25519_KEY_2
from tests.migrate.ldif import Tree, ldap_block
from tests.services.ldap import Slapd
from tests.services.slurm import SlurmAccounting

_n = itertools.count(1)
HASH = "$y$j9T$abcdefghijklmnopqrstu.$0123456789abcdefghijklmnopqrstuvwxyzABCDE"


@pytest.fixture
def slurm_env(slurm_accounting: SlurmAccounting, monkeypatch):
    for key, value in slurm_accounting.env.items():
        monkeypatch.setenv(key, value)
    return slurm_accounting


@dataclass(frozen=True)
class Names:
    """Each test's own site, people OU and name prefix: slurmdbd, slapd are session-wide."""

    site: str
    p: str
    people: str

    @classmethod
    def fresh(cls) -> Names:
        k = next(_n)
        return cls(f"adfarm{k}", f"ad{k}", f"ou=adoptpeople{k}")


def ldap_config(n: Names, slapd: Slapd, cli_config: Path, target: Path) -> Path:
    yaml = YAML(typ="safe")
    data = yaml.load(cli_config.read_text())
    data["ldap"] = {"default": ldap_block(slapd, f"{n.people},{slapd.suffix}")}
    with target.open("w") as fh:
        yaml.dump(data, fh)
    return target


def ldif(n: Names, slapd: Slapd) -> str:
    """The directory as an admin built it: people, the site's groups, automount maps."""
    t = Tree(slapd.suffix, n.people, n.site)
    a, b, c = f"{n.p}alice", f"{n.p}bob", f"{n.p}carol"
    lab = f"{n.p}lab"
    return "".join([
        t.containers(),
        t.user(a, 51001, "Alice Smith", "Smith", [ED25519_KEY], f"userPassword: {{CRYPT}}{HASH}\n"),
        t.user(b, 51002, "Bob de Vries", "de Vries", [ED25519_KEY_2], "shadowExpire: 30000\n"),
        t.user(c, 51003, "Carol Jones", "Jones", [ED25519_KEY]),
        t.group("login-ssh-users", 3_333_333_000, [a, b, c]),
        t.group("slurm-users", 3_333_333_001, [a, b]),
        t.group("active-users", 3_333_333_002, [a, b, c]),
        t.group(a, 51001, []), t.group(b, 51002, []), t.group(c, 51003, []),
        t.group(lab, 3_900_000_101, [a, c]),
        t.amap("auto.master"), t.amap("auto.home"), t.amap("auto.group"),
        t.key("auto.master", "/home", t.map_dn("auto.home")),
        t.key("auto.master", "/group", t.map_dn("auto.group")),
        t.key("auto.home", a, "-rw,nosuid nas1${HOST_SUFFIX}:/export/home/" + a),
        t.key("auto.group", lab, "-rw nas2${HOST_SUFFIX}:/export/group/" + lab),
    ])


def seed_slurm(n: Names, slurm: SlurmAccounting) -> None:
    SITE, P = n.site, n.p
    slurm.add_cluster(SITE)
    qos = f"{P}lab-qos"
    for args in (
        ("add", "qos", qos, "GrpTRES=cpu=32,mem=256G", "MaxTRESPerUser=cpu=8", "Priority=5",
         "Flags=DenyOnLimit"),
        ("add", "account", f"{P}lab", f"cluster={SITE}", "MaxJobs=20", "MaxWall=2-00:00:00"),
        ("add", "user", f"{P}alice,{P}bob", f"account={P}lab", "partition=cpu,gpu",
         f"cluster={SITE}", f"qos={qos}", f"defaultqos={qos}"),
        ("add", "coordinator", f"account={P}lab", f"names={P}alice"),
    ):
        result = slurm.sacctmgr("-i", *args, check=False)
        assert result.returncode == 0 and not result.stderr.strip(), result


@pytest.fixture
async def cluster(empty_db, cli, slurm_env, slapd, cli_config,
                  tmp_path) -> tuple[Path, Names]:
    n = Names.fresh()
    seed_slurm(n, slurm_env)
    slapd.ldapadd(ldif(n, slapd))
    config = ldap_config(n, slapd, cli_config, tmp_path / "config.yaml")
    made = await cli("ng", "site", "new", "-s", n.site, "--fqdn", "adfarm.example.edu",
                     config=config)
    assert made.code == 0, made.stderr
    return config, n


async def test_adopt_then_first_syncs_plan_nothing(cli, cluster):
    config, n = cluster
    SITE, P = n.site, n.p
    dry = await cli("ng", "site", "adopt", "-s", SITE, "--from-slurm", "--from-ldap",
                    "--dry-run", "--json", config=config)
    assert dry.code == 0, dry.stderr
    assert dry.json()["refused"] == [] and dry.json()["qos_to_tag"] == [f"{P}lab-qos"]
    assert await User.find({}).count() == 0

    result = await cli("ng", "site", "adopt", "-s", SITE, "--from-slurm", "--from-ldap",
                       "--json", config=config)
    assert result.code == 0, result.stderr
    report = result.json()
    assert report["written"] and report["qos_tagged"] == [f"{P}lab-qos"]
    assert report["notes"] == [], report["notes"]

    slurm = await cli("ng", "slurm", "sync", "-s", SITE, "--json", config=config)
    assert slurm.code == 0, slurm.stderr
    assert slurm.json()["processes"] == 0, slurm.json()["batches"]
    ldap = await cli("ng", "ldap", "sync-site", "-s", SITE, "--dry-run", "--full", "--json",
                     config=config)
    assert ldap.code == 0, ldap.stderr
    assert ldap.json()["writes"] == 0, ldap.json()

    # what was created, field by field where it matters
    alice = await User.find_one({"name": f"{P}alice"})
    bob = await User.find_one({"name": f"{P}bob"})
    assert (alice.uid, alice.email, alice.fullname, alice.surname, alice.password,
            alice.status, alice.access) == (51001, f"{P}alice@example.edu", "Alice Smith",
                                            None, HASH, "active", ["login-ssh", "slurm"])
    assert bob.surname == "de Vries" and bob.expires_at is not None
    assert {(k.user, k.key) for k in await SshKey.find({}).to_list()} == {
        (f"{P}alice", ED25519_KEY), (f"{P}bob", ED25519_KEY_2), (f"{P}carol", ED25519_KEY)}
    assert await UserSiteInfo.find({"site": SITE}).count() == 3
    groups = {g.name: (g.type, g.gid) for g in await Group.find({}).to_list()}
    assert groups[f"{P}lab"] == ("group", 3_900_000_101)
    assert groups["slurm-users"] == ("access", 3_333_333_001)
    assert groups[f"{P}bob"] == ("user", 51002)
    edges = {(m.user, tuple(m.roles)) for m in await GroupMembership.find({}).to_list()}
    assert edges == {(f"{P}alice", ("member",)), (f"{P}bob", ("slurmer",)),
                     (f"{P}carol", ("member",))}
    account = await SlurmAccount.find_one({"group": f"{P}lab"})
    assert account.coordinators == [f"{P}alice"] and account.limits.max_user_jobs == 20
    qos = await SlurmQOS.find_one({"name": f"{P}lab-qos"})
    assert (qos.priority, qos.flags) == (5, ["DenyOnLimit"])
    buckets = {a.bucket: a.tres.model_dump() for a in await SlurmAllocation.find({}).to_list()}
    assert buckets == {"group_limits": {"cpus": 32, "gpus": None, "mem": "256G"},
                       "user_limits": {"cpus": 8, "gpus": None, "mem": None}}
    assert {(a.partition, tuple(a.qos)) for a in await SlurmAssociation.find({}).to_list()} == {
        ("cpu", (f"{P}lab-qos",)), ("gpu", (f"{P}lab-qos",))}
    assert {(m.name, m.prefix) for m in await AutomountMap.find({}).to_list()} == {
        ("auto.home", "/home"), ("auto.group", "/group")}
    home = await Storage.find_one({"category": "home"})
    assert (home.name, home.owner, home.mount_overrides.options) == (
        f"{P}alice", f"{P}alice", ["rw", "nosuid"])
    volume = await StorageVolume.find_one({"name": home.volume})
    assert (volume.host, volume.host_path) == ("nas1", f"/export/home/{P}alice")
    assert await History.find({"op": "adopt_site"}).count() == 1

    again = await cli("ng", "site", "adopt", "-s", SITE, "--from-slurm", "--from-ldap",
                      "--json", config=config)
    assert again.code == 0 and again.json()["written"] is False, again.stderr
    assert await History.find({"op": "adopt_site"}).count() == 1


async def test_conflicts_refuse_and_name_the_reason(cli, cluster, slurm_env):
    config, n = cluster
    SITE, P = n.site, n.p
    slurm_env.sacctmgr("-i", "add", "user", f"{P}dave", f"account={P}lab", "partition=cpu",
                       f"cluster={SITE}", f"qos={P}lab-qos")
    slurm_env.sacctmgr("-i", "add", "account", f"{P}orphan", f"cluster={SITE}")
    slurm_env.sacctmgr("-i", "modify", "account", "where", f"name={P}lab",
                       f"cluster={SITE}", "set", "GrpSubmit=7")
    await User(name=f"{P}other", uid=51002, gid=51002, email="o@example.edu",
               fullname="Other Person", home_directory=f"/home/{P}other").insert()
    result = await cli("ng", "site", "adopt", "-s", SITE, "--from-slurm", "--from-ldap",
                       config=config)
    assert result.code == 2
    text = result.stderr
    assert f"users {P}dave: in Slurm (account {P}lab) but neither in the directory" in text
    assert f"slurm_accounts {P}orphan: no group of that name" in text
    assert "GrpSubmit" in text and "not in the model" in text
    assert f"users {P}bob: uid 51002 is already taken by ('{P}other',)" in text
    assert "nothing was written" in text
    assert await User.find({}).count() == 1

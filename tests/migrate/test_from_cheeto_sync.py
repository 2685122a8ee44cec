"""After importing a reference database, ``ng slurm sync`` against a slurmdbd, and ``ng
ldap sync-site --dry-run --full`` against a directory, that a person seeded by hand to the
same state plan nothing: the import reproduced the reference's intent exactly (QOS
buckets, account limits, coordinators, associations per partition; entries, per-site
status and access overrides, roles, sticky groups, automount options)."""

from __future__ import annotations

import pytest
from ruamel.yaml import YAML

from tests.factories import ED25519_KEY, ED25519_KEY_2
from tests.migrate.ldif import Tree, ldap_block
from tests.migrate.reference_dump import HASH, build
from tests.services.ldap import Slapd
from tests.services.slurm import SlurmAccounting

SITE = "migfarm"
P = "mg"  # slurmdbd's users and QOS are global: this module's own names
LAB = f"{P}lab"


@pytest.fixture
def slurm_env(slurm_accounting: SlurmAccounting, monkeypatch):
    for key, value in slurm_accounting.env.items():
        monkeypatch.setenv(key, value)
    return slurm_accounting


def seed_by_hand(slurm: SlurmAccounting) -> None:
    """What an admin would have typed to build the reference's cluster."""
    slurm.add_cluster(SITE)
    qos = f"{P}{LAB}-high-qos"  # the dump prefixes QOS names too
    for args in (
        ("add", "qos", qos, "GrpTRES=cpu=64,gres/gpu=4,mem=512G",
         "MaxTRESPerUser=cpu=16,mem=128G", "MaxTRESPerJob=cpu=8", "Priority=10",
         "Flags=DenyOnLimit,NoDecay", f"Description=cheeto:{SITE}"),
        ("add", "account", LAB, f"cluster={SITE}", "MaxJobs=10", "MaxSubmit=100",
         "MaxWall=7-00:00:00"),
        ("add", "user", f"{P}alice,{P}bob,{P}carol", f"account={LAB}", "partition=high,low",
         f"cluster={SITE}", f"qos={qos}", f"defaultqos={qos}"),
        ("add", "coordinator", f"account={LAB}", f"names={P}alice"),
    ):
        result = slurm.sacctmgr("-i", *args, check=False)
        assert result.returncode == 0 and not result.stderr.strip(), result


async def test_import_then_slurm_sync_plans_nothing(empty_db, cli, slurm_env, tmp_path):
    dump = build(site=SITE, lab=LAB, prefix=P)
    imported = await cli("migrate", "from-cheeto", "--dump", str(dump.write(tmp_path / "d")))
    assert imported.code == 0, imported.stderr
    seed_by_hand(slurm_env)
    result = await cli("ng", "slurm", "sync", "-s", SITE, "--json")
    assert result.code == 0, result.stderr
    report = result.json()
    assert report["processes"] == 0, result.stderr + str(report)
    # and the check has teeth: an account the reference did not have is drift
    slurm_env.sacctmgr("-i", "add", "account", f"{P}stray", f"cluster={SITE}")
    drift = (await cli("ng", "slurm", "sync", "-s", SITE, "--json")).json()
    assert drift["processes"] == 1 and drift["deletions"] == 1


def reference_directory(t: Tree, p: str, lab: str) -> str:
    """What the reference's site looks like in LDAP, typed in by hand."""
    a, b, c = f"{p}alice", f"{p}bob", f"{p}carol"
    everyone = [a, b, c]
    home = "-nfsvers=4.2,nosuid,rw nas1.example.edu${HOST_SUFFIX}:/export/home/" + a
    return "".join([
        t.containers(),
        t.user(a, 41001, "Alice Smith", "Smith", [ED25519_KEY], f"userPassword: {{CRYPT}}{HASH}\n"),
        t.user(b, 41002, "Bob de Vries", "de Vries", [ED25519_KEY_2]),
        t.user(c, 41003, "Carol Jones", "Jones", []),
        t.group("login-ssh-users", 3_333_333_000, everyone),
        t.group("slurm-users", 3_333_333_001, everyone),  # carol: by her site override
        t.group("sudo-users", 3_333_333_002, [a]),
        t.group("root-ssh-users", 3_333_333_003, []),
        t.group("active-users", 3_333_333_004, everyone),  # carol: by her site override
        t.group("inactive-users", 3_333_333_005, []),
        t.group("disabled-users", 3_333_333_006, []),
        t.group("offboarding-users", 3_333_333_007, []),
        t.group(a, 41001, []), t.group(b, 41002, []), t.group(c, 41003, []),
        t.group(lab, 3_900_000_001, everyone),
        t.group(f"{p}{t.site}-everyone", 3_900_000_002, everyone),  # sticky: the whole site
        t.amap("auto.master"), t.amap("auto.home"), t.amap("auto.group"),
        t.key("auto.master", "/home", t.map_dn("auto.home")),
        t.key("auto.master", "/group", t.map_dn("auto.group")),
        t.key("auto.home", a, home),
        t.key("auto.group", lab, "-rw qb.example.edu${HOST_SUFFIX}:/labs/" + lab),
    ])


async def test_import_then_ldap_sync_site_plans_nothing(empty_db, cli, slapd: Slapd,
                                                         cli_config, tmp_path):
    site, p, lab = "migldap", "ml", "mllab"
    dump = build(site=site, lab=lab, prefix=p)
    imported = await cli("migrate", "from-cheeto", "--dump", str(dump.write(tmp_path / "d")))
    assert imported.code == 0, imported.stderr
    tree = Tree(slapd.suffix, "ou=migpeople", site)
    slapd.ldapadd(reference_directory(tree, p, lab))
    yaml = YAML(typ="safe")
    data = yaml.load(cli_config.read_text())
    data["ldap"] = {"default": ldap_block(slapd, tree.people)}
    config = tmp_path / "config.yaml"
    with config.open("w") as fh:
        yaml.dump(data, fh)
    result = await cli("ng", "ldap", "sync-site", "-s", site, "--dry-run", "--full", "--json",
                       config=config)
    assert result.code == 0, result.stderr
    report = result.json()
    assert report["writes"] == 0, report
    # the check has teeth: a member added by hand is drift the sync would remove
    slapd.ldapmodify(f"dn: cn=sudo-users,{tree.groups}\nchangetype: modify\n"
                     f"add: memberUid\nmemberUid: {p}bob\n")
    drift = await cli("ng", "ldap", "sync-site", "-s", site, "--dry-run", "--full", "--json",
                      config=config)
    assert drift.json()["writes"] == 1

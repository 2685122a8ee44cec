"""Document-level rules: users, groups and the shorthand rule, membership roles, site
settings (sticky default account, one home mount mechanism), Slurm TRES and associations.
Pure pydantic unless a test needs the store (save-time re-validation)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cheeto_like.constants import DEFAULT_SHELL
from cheeto_like.models import (
    Group,
    GroupMembership,
    Site,
    SlurmAssociation,
    SlurmQOS,
    User,
    UserSiteInfo,
)
from cheeto_like.models.site import SiteSlurmSettings, SiteStorageSettings
from cheeto_like.models.slurm import SlurmTRES


@pytest.fixture(autouse=True)
def _bound(store):
    """Documents can only be built once beanie is bound to a database."""


def make_user(**overrides: object) -> User:
    fields: dict[str, object] = dict(name="alice", email="alice@example.org", uid=1001, gid=1001,
                                     fullname="Alice Liddell", home_directory="/home/alice")
    fields.update(overrides)
    return User(**fields)


# -- User ------------------------------------------------------------------------------------


def test_user_defaults():
    user = make_user()
    assert user.shell == DEFAULT_SHELL and user.type == "user"
    assert user.status is None and user.access == [] and user.comments == []
    assert user.password is None and user.expires_at is None
    assert isinstance(user.id, str) and len(user.id) == 32
    assert user.created_at.tzinfo is not None


@pytest.mark.parametrize(("field", "value"), [
    ("name", "x" * 33), ("name", "Alice"), ("uid", -1), ("uid", 4_294_967_296),
    ("gid", -1), ("shell", "/bin/fish"), ("email", "not-an-email"), ("type", "root"),
    ("fullname", "  "), ("access", ["Bad Access"]), ("status", "no such"),
])
def test_user_refuses_invalid_fields(field, value):
    with pytest.raises(ValidationError):
        make_user(**{field: value})


@pytest.mark.parametrize("uid", [0, 4_294_967_295])
def test_user_accepts_uid_bounds(uid):
    assert make_user(uid=uid, gid=uid).uid == uid


def test_user_assignment_is_validated():
    user = make_user()
    with pytest.raises(ValidationError):
        user.shell = "/bin/fish"
    with pytest.raises(ValidationError):
        user.uid = -5


def test_user_password_must_be_a_crypt_hash():
    with pytest.raises(ValidationError, match="crypt"):
        make_user(password="hunter2")
    assert make_user(password="$y$j9T$abc$def").password.startswith("$y$")


def test_user_access_is_deduplicated_keeping_order():
    assert make_user(access=["slurm", "login-ssh", "slurm"]).access == ["slurm", "login-ssh"]
    assert UserSiteInfo(user="a", site="farm", access=["b", "a", "b"]).access == ["b", "a"]


def test_ldap_surname_falls_back_to_last_word_of_fullname():
    assert make_user().ldap_surname == "Liddell"
    assert make_user(surname="Pleasance").ldap_surname == "Pleasance"


# -- Group -----------------------------------------------------------------------------------


def test_plain_group_has_no_shorthand():
    assert Group(name="lab", gid=5).shorthand is None
    with pytest.raises(ValidationError, match="only access and status groups"):
        Group(name="lab", gid=5, shorthand="lab")


@pytest.mark.parametrize("kind", ["access", "status"])
def test_special_group_needs_a_shorthand(kind):
    with pytest.raises(ValidationError, match="needs a shorthand"):
        Group(name="sudo-users", gid=5, type=kind)
    group = Group(name="sudo-users", gid=5, type=kind, shorthand="sudo")
    assert group.is_special


def test_group_type_and_gid_are_validated():
    with pytest.raises(ValidationError):
        Group(name="lab", gid=5, type="team")
    with pytest.raises(ValidationError):
        Group(name="lab", gid=4_294_967_296)
    assert Group(name="lab", gid=4_294_967_295).gid == 4_294_967_295


# -- GroupMembership -------------------------------------------------------------------------


def test_membership_roles_are_deduplicated_and_sorted():
    edge = GroupMembership(user="a", group="lab", site="farm",
                           roles=["sponsor", "member", "sponsor", "slurmer"])
    assert edge.roles == ["member", "slurmer", "sponsor"]


def test_membership_roles_must_not_be_empty_or_unknown():
    with pytest.raises(ValidationError):
        GroupMembership(user="a", group="lab", site="farm", roles=[])
    with pytest.raises(ValidationError):
        GroupMembership(user="a", group="lab", site="farm", roles=["owner"])


def test_membership_role_assignment_is_normalised():
    edge = GroupMembership(user="a", group="lab", site="farm", roles=["member"])
    edge.roles = ["sudoer", "member", "member"]
    assert edge.roles == ["member", "sudoer"]


# -- Site ------------------------------------------------------------------------------------


def test_site_defaults_are_empty():
    site = Site(name="farm", fqdn="Farm.Example.org")
    assert site.fqdn == "farm.example.org"
    assert site.aliases == [] and site.group.sticky == [] and site.slurm.sticky == []
    assert site.slurm.default_account is None and site.cluster_name == "farm"


def test_default_slurm_account_must_be_sticky():
    with pytest.raises(ValidationError, match="must be sticky"):
        SiteSlurmSettings(sticky=["lab"], default_account="other")
    ok = SiteSlurmSettings(sticky=["lab", "lab", "all"], default_account="lab")
    assert ok.sticky == ["lab", "all"]


def test_default_slurm_account_assignment_is_checked():
    site = Site(name="farm", fqdn="farm.example.org")
    with pytest.raises(ValidationError, match="must be sticky"):
        site.slurm.default_account = "lab"


async def test_in_place_mutation_breaking_the_sticky_rule_is_caught_at_save(empty_db):
    site = Site(name="farm", fqdn="farm.example.org",
                slurm=SiteSlurmSettings(sticky=["lab"], default_account="lab"))
    await site.insert()
    site.slurm.sticky.clear()  # bypasses assignment validation
    with pytest.raises(ValidationError, match="must be sticky"):
        await site.save()
    stored = await Site.find_one(Site.name == "farm")
    assert stored.slurm.sticky == ["lab"]


def test_home_mount_is_automount_or_static_not_both():
    with pytest.raises(ValidationError, match="not both"):
        SiteStorageSettings(home_automount_map="home", home_static_mount="homes")
    assert SiteStorageSettings(home_automount_map="home").home_static_mount is None
    assert SiteStorageSettings(home_static_mount="homes").home_automount_map is None


def test_site_default_home_quota_is_a_quota():
    assert SiteStorageSettings(default_home_quota="20g").default_home_quota == "20G"
    with pytest.raises(ValidationError):
        SiteStorageSettings(default_home_quota="20X")


def test_embedded_settings_refuse_unknown_keys():
    with pytest.raises(ValidationError):
        SiteSlurmSettings.model_validate({"stickyy": ["lab"]})


# -- Slurm -----------------------------------------------------------------------------------


def test_tres_parse_full_string():
    tres = SlurmTRES.parse("cpus=4 gpus=-1 mem=10G")
    assert (tres.cpus, tres.gpus, tres.mem) == (4, None, "10G")
    assert tres.mem_mb == 10 * 1024


def test_tres_parse_any_order_subset_and_commas():
    assert SlurmTRES.parse("mem=1.5t,cpus=8") == SlurmTRES(cpus=8, mem="1.5T")
    assert SlurmTRES.parse("gpus=inf").gpus is None
    assert SlurmTRES.parse("cpus=unlimited").cpus is None


@pytest.mark.parametrize("text", ["cpu=4", "cpus", "nodes=2", "cpus=4 cpus=5", "", "   ",
                                  "mem=10X", "cpus=-2", "cpus=four"])
def test_tres_parse_refuses_junk(text):
    with pytest.raises(ValueError):
        SlurmTRES.parse(text)


def test_tres_minus_one_means_unlimited():
    assert SlurmTRES(cpus=-1, gpus="-1", mem="-1") == SlurmTRES()
    assert SlurmTRES().mem_mb is None


def test_qos_flags_are_checked_and_sorted():
    qos = SlurmQOS(name="lab-qos", site="farm", flags=["NoDecay", "DenyOnLimit", "NoDecay"])
    assert qos.flags == ["DenyOnLimit", "NoDecay"]
    with pytest.raises(ValidationError):
        SlurmQOS(name="lab-qos", site="farm", flags=["Bogus"])
    assert SlurmQOS(name="q", site="farm").flags == ["DenyOnLimit"]


def test_association_default_qos_is_one_of_its_qos():
    assoc = SlurmAssociation(site="farm", account="lab", partition="high", qos=["b", "a"])
    assert assoc.qos == ["a", "b"] and assoc.default_qos == "a"
    with pytest.raises(ValidationError, match="not in"):
        SlurmAssociation(site="farm", account="lab", partition="high", qos=["a"],
                         default_qos="c")
    with pytest.raises(ValidationError):
        SlurmAssociation(site="farm", account="lab", partition="high", qos=[])

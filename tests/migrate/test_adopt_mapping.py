"""The adoption mapping on its own (the reconcilers' parsed states in, documents, notes
and refusals out): each thing the model cannot express is named, never guessed."""

from __future__ import annotations

from cheeto_like.migrate.adopt import DirectoryView, Known, adopt
from cheeto_like.models import Group, User
from cheeto_like.sync.ldap.state import entry
from cheeto_like.sync.slurm.state import AccountState, AssocKey, AssocState, QOSState, SlurmState


def _known(*users: str, groups: tuple[str, ...] = ("lab",)) -> Known:
    return Known(
        users={u: User(name=u, uid=1000 + i, gid=1000 + i, email=f"{u}@x.org", fullname=u.title(),
                       home_directory=f"/home/{u}", status="active", access=["slurm"])
               for i, u in enumerate(users)},
        groups={g: Group(name=g, gid=5000 + i) for i, g in enumerate(groups)})


def _docs(mapping, collection):
    return [m.doc for m in mapping.docs.get(collection, [])]


async def test_qos_of_another_cluster_and_odd_associations(store):
    state = SlurmState(
        cluster="c1",
        qos={"mine": QOSState("mine", group=(("cpu", 4), ("gres/gpu:a100", 1), ("mem", 2048))),
             "theirs": QOSState("theirs", owner="c2")},
        accounts={"lab": AccountState("lab", max_wall_minutes=60)},
        associations={
            AssocKey("u1", "lab", "p"): AssocState(frozenset({"mine"}), "mine"),
            AssocKey("u2", "lab", "p"): AssocState(frozenset({"mine"}), "mine"),
            AssocKey("u3", "lab", "p"): AssocState(frozenset({"theirs"}), "theirs"),
            AssocKey("u1", "lab", ""): AssocState(frozenset({"mine"}), "mine"),
            AssocKey("u2", "lab", "q"): AssocState(frozenset({"normal"}), "normal")})
    mapping = adopt("s1", slurm=state, directory=None, known=_known("u1", "u2", "u3"))
    assert [r.line() for r in mapping.refusals] == ["slurm_qos theirs: managed by cluster 'c2'"]
    notes = "\n".join(mapping.notes)
    assert "u1@lab/: no partition" in notes
    assert "u2@lab/q: QOS normal" in notes
    assert "users have different QOS; adopted mine (held by 2 of 3" in notes
    assert "gres/gpu:a100=1 cannot be expressed" in notes
    (alloc,) = _docs(mapping, "slurm_allocations")
    assert alloc.tres.model_dump() == {"cpus": 4, "gpus": None, "mem": "2G"}
    (account,) = _docs(mapping, "slurm_accounts")
    assert account.limits.max_job_length == "60" and account.limits.max_user_jobs == -1
    roles = {(m.user, tuple(m.roles)) for m in _docs(mapping, "group_membership")}
    assert roles == {("u1", ("slurmer",)), ("u2", ("slurmer",)), ("u3", ("slurmer",))}


async def test_unknown_users_and_groupless_accounts_are_refused(store):
    state = SlurmState(cluster="c1", qos={"q": QOSState("q")},
                       accounts={"lab": AccountState("lab"), "nogroup": AccountState("nogroup")},
                       associations={AssocKey("ghost", "lab", "p"): AssocState(frozenset({"q"}))},
                       coordinators={"lab": frozenset({"nobody"})})
    lines = [r.line() for r in adopt("s1", slurm=state, directory=None,
                                     known=_known()).refusals]
    assert "slurm_accounts nogroup: no group of that name in the directory or the store " \
           "(it needs a gid)" in lines
    assert "slurm_accounts lab: coordinators nobody are not users here" in lines
    assert any(line.startswith("users ghost: in Slurm (account lab) but neither")
               for line in lines)


def _user_entry(name: str, uid: int, **extra: list[str]):
    attrs = {"uid": [name], "cn": ["Ann Lee"], "displayName": ["Ann Lee"], "sn": ["Lee"],
             "mail": [f"{name}@x.org"], "uidNumber": [uid], "gidNumber": [uid],
             "homeDirectory": [f"/home/{name}"], "loginShell": ["/bin/bash"], **extra}
    return entry("user", f"uid={name},ou=people,dc=x", (), attrs)


def _group(name: str, gid: int, members: list[str]):
    return entry("group", f"cn={name},ou=groups,dc=x", (), {"cn": [name], "gidNumber": [gid],
                                                            "memberUid": members})


async def test_directory_oddities_become_notes_or_refusals(store):
    view = DirectoryView(
        users={"ann": _user_entry("ann", 7, userPassword=["{SSHA}abc"],
                                  sshPublicKey=["ssh-ed25519 AAAA untagged"]),
               "bo": _user_entry("bo", 8), "cy": _user_entry("cy", 9)},
        groups={"active-users": _group("active-users", 1, ["ann", "bo"]),
                "inactive-users": _group("inactive-users", 2, ["bo"]),
                "team": _group("team", 3, ["ann", "zed"]),
                "auto-none": _group("auto-none", 4, [])},
        maps={"auto.master": "automountmapname=auto.master,dc=x",
              "auto.share": "automountmapname=auto.share,dc=x"},
        automounts={("auto.share", "team"): entry("automount", "k", (), {
            "automountKey": ["team"],
            "automountInformation": ["-ro,soft nfs9${HOST_SUFFIX}:/export/share/team"]})})
    mapping = adopt("s1", slurm=None, directory=view, known=Known())
    lines = [r.line() for r in mapping.refusals]
    assert "users bo: in several status groups (active, inactive)" in lines
    assert "automount_maps auto.share: no key in auto.master mounts it" in lines
    notes = "\n".join(mapping.notes)
    assert "user ann: userPassword is not a crypt hash" in notes
    assert "user ann: an SSH key lacks the REMOTE_SSH_USER tag" in notes
    assert "group team: members zed have no entry under the user base" in notes
    assert "1 user entry under the user base belong" in notes  # cy is on no group here
    (ann,) = _docs(mapping, "users")
    assert (ann.status, ann.password, ann.shell) == ("active", None, "/bin/bash")
    assert [k.key for k in _docs(mapping, "ssh_keys")] == ["ssh-ed25519 AAAA untagged"]


async def test_automount_keys_become_volumes_and_storages(store):
    view = DirectoryView(
        users={"ann": _user_entry("ann", 7)},
        groups={"ann": _group("ann", 7, []), "team": _group("team", 30, ["ann"])},
        maps={"auto.master": "automountmapname=auto.master,dc=x",
              "auto.share": "automountmapname=auto.share,dc=x"},
        automounts={
            ("auto.master", "/share"): entry("automount", "m", (), {
                "automountInformation": ["automountMapName=auto.share,dc=x"]}),
            ("auto.share", "team"): entry("automount", "k", (), {
                "automountInformation": ["-ro,soft nfs9${HOST_SUFFIX}:/export/share/team"]})})
    mapping = adopt("s1", slurm=None, directory=view, known=Known())
    assert mapping.refusals == []
    (amap,) = _docs(mapping, "automount_maps")
    assert (amap.name, amap.prefix) == ("auto.share", "/share")
    (volume,) = _docs(mapping, "storage_volumes")
    assert (volume.host, volume.host_path) == ("nfs9", "/export/share/team")
    (storage,) = _docs(mapping, "storages")
    assert (storage.category, storage.owner, storage.group, storage.mount_overrides.options) \
        == ("share", "ann", "team", ["ro", "soft"])
    kinds = {g.name: g.type for g in _docs(mapping, "groups")}
    assert kinds == {"ann": "user", "team": "group"}

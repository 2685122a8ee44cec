"""The mapping layer on its own: every reference shape becomes our documents, and every
problem is a refusal naming the document and the reason (no store writes here; beanie
only needs its models bound, which the ``store`` fixture does)."""

from __future__ import annotations

from bson import DBRef, ObjectId

from cheeto_like.migrate.from_cheeto import map_reference, new_uuid, plain, ref_id
from tests.migrate.reference_dump import build


def test_ref_id_reads_every_reference_shape():
    oid = ObjectId()
    assert ref_id(DBRef("users", oid)) == oid
    assert ref_id(oid) == oid
    assert ref_id({"_id": oid, "name": "snapshot"}) == oid
    assert ref_id(str(oid)) == oid
    assert ref_id(None) is None and ref_id("not-an-id") is None


def test_plain_turns_ids_into_text():
    oid = ObjectId()
    assert plain({"a": [DBRef("users", oid)], "b": oid, "_class_id": "X"}) == {
        "a": [str(oid)], "b": str(oid)}


async def test_complete_dump_maps_without_refusal(store):
    dump = build()
    mapping = map_reference(dump.docs)
    assert [r.line() for r in mapping.refusals] == []
    counts = {name: len(items) for name, items in mapping.ordered()}
    assert counts == {
        "sites": 1, "groups": 13, "users": 3, "names": 13, "ssh_keys": 2,
        "user_site_info": 3, "group_membership": 3, "slurm_partitions": 2, "slurm_qos": 1,
        "slurm_allocations": 3, "slurm_accounts": 1, "slurm_associations": 2,
        "automount_maps": 2, "storage_volumes": 3, "static_mounts": 1, "storages": 2,
        "hippo_events": 1, "history": 2}
    user = mapping.docs["users"][0].doc
    assert user.id == new_uuid("users", dump.ids["u:alice"])  # stable across runs
    assert len(user.id) == 32 and int(user.id, 16) >= 0


async def test_two_reference_rows_on_one_partition_merge_into_one_with_a_note(store):
    dump = build()
    extra = dict(dump.docs["slurm_qos"][0], _id=ObjectId(), name="smithlab-low-qos",
                 group_limits=[], user_limits=[], job_limits=[])
    dump.docs["slurm_qos"].append(extra)
    dump.docs["slurm_associations"].append(dict(dump.docs["slurm_associations"][0],
                                                _id=ObjectId(),
                                                qos=DBRef("slurm_qos", extra["_id"])))
    mapping = map_reference(dump.docs)
    assert mapping.refusals == []
    high = [m.doc for m in mapping.docs["slurm_associations"] if m.doc.partition == "high"]
    assert len(high) == 1 and high[0].qos == ["smithlab-high-qos", "smithlab-low-qos"]
    assert any("merged" in note for note in mapping.notes)


async def test_every_problem_is_refused_with_its_reason(store):
    dump = build()
    missing = ObjectId()
    dump.docs["ssh_keys"][0]["user"] = DBRef("users", missing)         # dangling Link
    dump.docs["users"][1]["email"] = "not-an-email"                    # invalid field
    dump.docs["slurm_allocations"].append({"_id": ObjectId(), "tres": {"cpus": 1}})  # orphan
    dump.docs["users"][2]["status"] = DBRef("groups", dump.ids["a:sudo"])  # access as status
    mapping = map_reference(dump.docs)
    lines = [r.line() for r in mapping.refusals]
    assert any(line.startswith("ssh_keys ") and str(missing) in line and "user" in line
               for line in lines), lines
    assert any(line.startswith("users bob ") and "email" in line for line in lines), lines
    assert any("no QOS lists it" in line for line in lines), lines
    assert any(line.startswith("users carol ") and "not a status group" in line
               for line in lines), lines


async def test_group_named_like_a_user_is_refused(store):
    dump = build()
    dump.docs["groups"].append({"_id": ObjectId(), "_class_id": "Group", "name": "bob",
                                "gid": 3_900_000_099, "type": "group"})
    lines = [r.line() for r in map_reference(dump.docs).refusals]
    assert any("share one namespace" in line for line in lines), lines


async def test_the_same_record_twice_in_the_source_is_refused(empty_db):
    from cheeto_like.migrate.writer import plan_import

    dump = build()
    twin = dict(dump.docs["slurm_partitions"][0], _id=ObjectId())
    dump.docs["slurm_partitions"].append(twin)
    plan = await plan_import(empty_db, map_reference(dump.docs))
    assert "slurm_partitions high/farm: appears more than once in the source" in plan.refusals

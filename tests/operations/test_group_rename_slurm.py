"""A group rename renames the QOS named after it (``<group>-<partition>-qos``, what
``ng slurm provision`` creates), with the allocations and association lists naming them
(issue 11, item 7). The Slurm side is in tests/sync/test_slurm_live.py."""

from __future__ import annotations

from cheeto_like.models import SlurmAllocation, SlurmAssociation, SlurmQOS
from cheeto_like.operations import slurm as slurm_ops
from cheeto_like.operations.group import RenameGroup
from tests.factories import AUTHOR, history, make_group, make_site


async def test_group_rename_renames_its_qos_allocations_and_association_lists(db):
    await make_site(db, "farm")
    await make_group(db, "lab")
    await slurm_ops.CreateSlurmPartition.run(db, AUTHOR, site="farm", name="gpu")
    await slurm_ops.ProvisionSlurmAllocation.run(db, AUTHOR, site="farm", group="lab",
                                                 partition="gpu", group_limits={"cpus": 4})
    await slurm_ops.CreateSlurmQOS.run(db, AUTHOR, site="farm", name="labrat-qos")  # no dash
    await RenameGroup.run(db, AUTHOR, name="lab", new_name="biolab")
    assert {q.name for q in await SlurmQOS.find_all().to_list()} == {"biolab-gpu-qos",
                                                                      "labrat-qos"}
    [assoc] = await SlurmAssociation.find_all().to_list()
    assert (assoc.account, assoc.qos, assoc.default_qos) == ("biolab", ["biolab-gpu-qos"],
                                                             "biolab-gpu-qos")
    assert {a.qos for a in await SlurmAllocation.find_all().to_list()} == {"biolab-gpu-qos"}
    [row] = await history("rename_group")
    assert row.changes["references"]["slurm_qos.name"] == 1


async def test_a_taken_qos_name_is_left_alone(db):
    await make_site(db, "farm")
    await make_group(db, "lab")
    await slurm_ops.CreateSlurmPartition.run(db, AUTHOR, site="farm", name="gpu")
    await slurm_ops.ProvisionSlurmAllocation.run(db, AUTHOR, site="farm", group="lab",
                                                 partition="gpu")
    await slurm_ops.CreateSlurmQOS.run(db, AUTHOR, site="farm", name="new-gpu-qos")
    await RenameGroup.run(db, AUTHOR, name="lab", new_name="new")
    [assoc] = await SlurmAssociation.find_all().to_list()
    assert assoc.account == "new" and assoc.qos == ["lab-gpu-qos"]

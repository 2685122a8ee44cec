"""The plan's exact output for a non-trivial, generated shape, pinned (issue 31).

Why: the plan is tuned for speed at site scale (grouping, ordering, target strings), and
every such change must leave the commands byte for byte as they were. A seeded generator
makes two clusters that differ in every way the plan handles (new, changed and stale
QOS, accounts and associations; partition-less rows; several partition sets and QOS
settings per account; quota blocks; hand-set limits; default-account moves; renames;
coordinators; more than ``MAX_NAMES_PER_COMMAND`` names in one shape), and the plan of
each pair is compared with the JSON recorded in ``data/slurm_plan_golden.json``.

Regenerate the file only for an intended change of output:
``.venv/bin/python tests/sync/test_slurm_plan_golden.py --write`` (then review its diff).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

from cheeto_like.sync.slurm.plan import plan
from cheeto_like.sync.slurm.state import (
    AccountState,
    AssocKey,
    AssocState,
    QOSState,
    SlurmState,
    tres,
)

GOLDEN = Path(__file__).with_name("data") / "slurm_plan_golden.json"
C = "farm"
PARTITIONS = ("cpu", "gpu", "bigmem", "")


def _qos_state(rng: random.Random, name: str, owner: str | None) -> QOSState:
    return QOSState(name, group=tres({"cpu": rng.choice((8, 16, 64))}),
                    user=tres({"mem": 1024 * rng.choice((1, 2))}) if rng.random() < 0.5 else (),
                    priority=rng.randrange(3),
                    flags=frozenset({"DenyOnLimit"}) if rng.random() < 0.3 else frozenset(),
                    owner=owner)


def _assoc_state(rng: random.Random, qos_names: list[str]) -> AssocState:
    qos = frozenset(rng.sample(qos_names, rng.choice((1, 1, 2))))
    default = rng.choice((None, min(qos), max(qos)))
    return AssocState(qos, default)


def _pair(seed: int, users: int, most: int = 3,
          account_major: bool = False) -> tuple[SlurmState, SlurmState]:
    """A desired and an actual state of ``users`` users in at most ``most`` accounts
    each, generated from ``seed``; ``account_major``: the desired rows in the desired
    builder's order (account, partition, user), so long runs share an account."""
    rng = random.Random(seed)
    qos_names = [f"q{i}" for i in range(8)]
    accounts = ["site", "lab-a", "lab-b", "labc", "zeta", "a"]
    names = [f"u{i:04d}" for i in range(users)]
    desired_rows: dict[AssocKey, AssocState] = {}
    for user in names:
        for account in rng.sample(accounts, min(most, rng.choice((1, 1, 2, 3)))):
            state = _assoc_state(rng, qos_names[:3]) if rng.random() < 0.3 else AssocState(
                frozenset({"q0"}), "q0")
            for partition in rng.sample(PARTITIONS, rng.choice((1, 2, 3, 3, 3))):
                desired_rows[AssocKey(user, account, partition)] = state
    cohort = [f"c{i:03d}" for i in range(150)]  # one shape: more than one command's names
    for user in cohort:
        for partition in ("cpu", "gpu"):
            desired_rows[AssocKey(user, "site", partition)] = AssocState(frozenset({"q0"}),
                                                                        "q0")
    # the cluster: most wanted rows, some changed, some extra (stale), some hand limits
    actual_rows: dict[AssocKey, AssocState] = {}
    for key, want in desired_rows.items():
        roll = rng.random()
        if roll < 0.35 or key.user in cohort:
            continue  # missing: added
        if roll < 0.45:
            actual_rows[key] = _assoc_state(rng, qos_names)  # changed QOS
        elif roll < 0.48:
            actual_rows[key] = want._replace(default_qos=min(want.qos),
                                             extra=(("MaxJobs", "3"),))
        elif roll < 0.5:
            actual_rows[key] = want._replace(default_qos=min(want.qos),
                                             grp_tres_mins=tres({"cpu": 0}))
        else:
            actual_rows[key] = want._replace(default_qos=want.default_qos or min(want.qos))
    for partition in ("cpu", "gpu"):  # renamed in the store since (``renames``)
        desired_rows[AssocKey("renamed", "lab-a", partition)] = AssocState(frozenset({"q0"}))
        actual_rows[AssocKey("oldname", "lab-a", partition)] = AssocState(frozenset({"q0"}),
                                                                          "q0")
    for user in [*rng.sample(names, users // 5), "gone1", "gone2"]:
        actual_rows[AssocKey(user, rng.choice([*accounts, "old"]), rng.choice(PARTITIONS))] = \
            AssocState(frozenset({"q1"}), "q1")
    # quota blocks on some wanted users' rows (slurm_quota.with_blocks)
    blocked = set(rng.sample(names, users // 10))
    desired_rows = {k: (v._replace(grp_tres_mins=tres({"cpu": 0, "gres/gpu": 0}))
                        if k.user in blocked else v) for k, v in desired_rows.items()}
    actual_defaults: dict[str, str] = {}
    for key in actual_rows:
        if key.user not in actual_defaults or rng.random() < 0.2:
            actual_defaults[key.user] = key.account
    default_rows = frozenset(k for k in actual_rows if actual_defaults.get(k.user) == k.account)
    wanted_users = {k.user for k in desired_rows}
    if account_major:
        desired_rows = dict(sorted(desired_rows.items(),
                                   key=lambda row: (row[0].account, row[0].partition)))
    desired = SlurmState(
        cluster=C,
        qos={n: _qos_state(rng, n, None) for n in qos_names[:6]},
        accounts={a: AccountState(a, max_user_jobs=rng.choice((None, 10)),
                                  grp_tres_mins=tres({"cpu": 0}) if a == "zeta" else ())
                  for a in accounts},
        associations=desired_rows,
        default_accounts={u: "site" for u in sorted(wanted_users) if rng.random() < 0.6},
        coordinators={"lab-a": frozenset(names[:3]), "site": frozenset(names[5:7])},
        renames={"oldname": "renamed", "gone1": "u0001", "old0": "u0002"},
        notes=("a note",))
    actual = SlurmState(
        cluster=C,
        qos={**{n: _qos_state(rng, n, C) for n in qos_names[2:]},
             "theirs": _qos_state(rng, "theirs", "other"), "q7": _qos_state(rng, "q7", C)},
        accounts={**{a: AccountState(a, max_user_jobs=10) for a in accounts[1:]},
                  "old": AccountState("old", extra=(("GrpWall", "60"),))},
        associations=actual_rows,
        default_accounts=actual_defaults,
        default_rows=default_rows,
        coordinators={"lab-a": frozenset(names[2:5]), "old": frozenset({"u0009"})},
        foreign_qos=frozenset({"q6"}))
    return desired, actual


CASES = {"mixed-300": (31, 300, 3), "mixed-40": (7, 40, 3), "mixed-400": (1031, 400, 3),
         "one-account-each-200": (5, 200, 1), "account-major-300": (11, 300, 3, True),
         "account-major-one-each-300": (13, 300, 1, True)}


def _rendered(seed: int, users: int, most: int,
              account_major: bool = False) -> dict[str, Any]:
    desired, actual = _pair(seed, users, most, account_major)
    found = plan(desired, actual)
    empty = plan(desired, SlurmState(cluster=C))
    return {"plan": found.as_dict(), "qos_removed": [list(r) for r in found.qos_removed],
            "removals": found.removals, "from_empty": empty.as_dict(),
            "nothing_to_do": plan(desired, desired).is_empty}


def test_the_plan_of_each_generated_shape_is_exactly_the_recorded_one() -> None:
    recorded = json.loads(GOLDEN.read_text())
    assert sorted(recorded) == sorted(CASES)
    for name, case in CASES.items():
        got = json.loads(json.dumps(_rendered(*case)))
        want = recorded[name]
        assert got["plan"]["counts"] == want["plan"]["counts"], name
        for kind in ("plan", "from_empty"):
            for got_batch, want_batch in zip(got[kind]["batches"], want[kind]["batches"],
                                             strict=True):
                assert got_batch == want_batch, (name, kind, want_batch["label"])
        assert got == want, name


def test_the_generated_shapes_exercise_every_batch_and_chunking() -> None:
    """The golden file is only worth as much as what the shapes cover."""
    recorded = json.loads(GOLDEN.read_text())
    labels = {b["label"] for case in recorded.values() for b in case["plan"]["batches"]}
    assert labels == {"rename users", "add qos", "modify qos", "add accounts",
                      "modify accounts", "add associations", "modify associations",
                      "set default accounts", "add coordinators", "remove coordinators",
                      "delete associations", "delete default associations", "delete qos",
                      "delete accounts"}
    biggest = max(len(c["targets"]) for case in recorded.values()
                  for b in case["from_empty"]["batches"] for c in b["commands"])
    assert biggest == 200  # a shape split over several commands (MAX_NAMES_PER_COMMAND)


if __name__ == "__main__" and "--write" in sys.argv:
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps({name: _rendered(*case) for name, case in CASES.items()},
                                 indent=0, sort_keys=True) + "\n")

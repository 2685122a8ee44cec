"""The sacctmgr conformance modules' harness (``test_sacctmgr_*.py``): raw sacctmgr
through the test slurmdbd, the read formats, and the reconciler's own parsers under test.
The ``mgr`` fixture is in ``conftest.py``; the ground rules are in
``test_sacctmgr_qos.py``'s docstring and docs/sacctmgr-notes.md."""

from __future__ import annotations

import subprocess

from cheeto_like.models.slurm import walltime_minutes
from cheeto_like.sync.slurm.state import parse_tres as parse_tres_cell
from tests.services.slurm import SlurmAccounting

Proc = subprocess.CompletedProcess[str]

QOS_FORMAT = "format=name,description,priority,flags,grptres,maxtrespu,maxtres"
ASSOC_FORMAT = (
    "format=cluster,account,user,partition,qos,defaultqos,maxjobs,grpjobs,maxsubmit,maxwall,"
    "parentname"
)
NORMAL_QOS_ROW = ("normal", "Normal QOS default", "0", "", "", "", "")
ROOT_ROWS = {
    # cluster|account|user|partition|qos|defaultqos|maxjobs|grpjobs|maxsubmit|maxwall|parent
    ("root", "", "", "normal", "", "", "", "", "", ""),
    ("root", "root", "", "normal", "", "", "", "", "", ""),
}


# ----------------------------------------------------------------- normalisers under test
# The reconciler's own parsers, checked here against what sacctmgr really prints.


def parse_tres(text: str) -> dict[str, int]:
    return dict(parse_tres_cell(text))


def parse_wall(text: str) -> int | None:
    return walltime_minutes(text)


def parse_qos_list(text: str) -> frozenset[str]:
    return frozenset(filter(None, text.split(",")))


# ----------------------------------------------------------------- harness


class Mgr:
    """sacctmgr with ``-i`` on every call, plus helpers for ``-P -n`` reads."""

    def __init__(self, slurm: SlurmAccounting) -> None:
        self.slurm = slurm

    def run(self, *args: str, rc: int | None = 0, stderr_ok: bool = False) -> Proc:
        """Run `sacctmgr -i *args`; assert the exit status unless rc is None.

        A call that exits 0 must also leave stderr empty (the reconciler's success test),
        except where a test expects sacctmgr's rc-0 complaints (stderr_ok).
        """
        result = self.slurm.sacctmgr("-i", *args, check=False)
        detail = f"stdout: {result.stdout}\nstderr: {result.stderr}"
        if rc is not None:
            assert result.returncode == rc, (
                f"sacctmgr -i {' '.join(args)} exited {result.returncode}, expected {rc}\n"
                + detail
            )
        if result.returncode == 0 and not stderr_ok:
            assert result.stderr == "", f"sacctmgr -i {' '.join(args)}: rc 0 with stderr\n{detail}"
        return result

    def fails(self, *args: str) -> Proc:
        return self.run(*args, rc=1)

    def rows(self, *args: str) -> list[tuple[str, ...]]:
        """`sacctmgr -i -P -n *args` split into tuples of cells."""
        out = self.run("-P", "-n", *args).stdout
        return [tuple(line.split("|")) for line in out.splitlines()]

    def assocs(self, cluster: str, *extra: str) -> set[tuple[str, ...]]:
        """This cluster's associations in ASSOC_FORMAT order, cluster column dropped."""
        rows = self.rows("show", "assoc", "where", f"cluster={cluster}", *extra, ASSOC_FORMAT)
        assert all(row[0] == cluster for row in rows)
        return {row[1:] for row in rows}

    def user_assocs(self, cluster: str, fmt: str = "account,user,partition,qos,defaultqos"):
        rows = self.rows("show", "assoc", "where", f"cluster={cluster}", f"format={fmt}")
        return {row for row in rows if row[1] and row[0] != "root"}

    def qos(self, name: str) -> tuple[str, ...]:
        rows = self.rows("show", "qos", "where", f"name={name}", QOS_FORMAT)
        assert len(rows) == 1, rows
        return rows[0]

    def defaults(self, cluster: str) -> dict[str, str]:
        """user -> default account on `cluster` (blank for users with no association there)."""
        rows = self.rows(
            "show", "user", "where", f"cluster={cluster}", "format=user,defaultaccount"
        )
        return dict(rows)  # type: ignore[arg-type]

    def coordinators(self, account: str) -> list[str]:
        rows = self.rows("show", "account", account, "withcoord", "format=account,coordinators")
        assert len(rows) == 1, rows
        return [name for name in rows[0][1].split(",") if name]

    def cluster(self, name: str) -> str:
        self.slurm.add_cluster(name)
        return name


def lines_of(text: str) -> list[str]:
    """Non-blank lines with runs of blanks squeezed (sacctmgr pads its tables)."""
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


def squeezed(text: str) -> str:
    return "\n".join(lines_of(text))

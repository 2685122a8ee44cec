"""Conformance of sacctmgr against a real slurmdbd, continued: process behaviour: prompts
without -i, an unreachable slurmdbd, call latency, sudo -n.

Ground rules and the normalisers under test: test_sacctmgr_qos.py and
sacctmgr_harness.py; the prose is docs/sacctmgr-notes.md.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import time
from pathlib import Path

import pytest

from tests.adapters.sacctmgr_harness import (
    QOS_FORMAT,
    Mgr,
    Proc,
    lines_of,
)
from tests.services.slurm import SlurmAccounting

# ================================================================= process behaviour


def test_without_i_writes_and_some_reads_prompt(mgr: Mgr) -> None:
    """Never run sacctmgr without -i: it asks "(N/y)" and, with stdin at EOF, loops forever
    printing "Y or N please". Here we answer "n" to see the prompt safely."""
    cluster = mgr.cluster("cfprompt")
    env = mgr.slurm.client_env()

    def answer_no(*args: str) -> Proc:
        return subprocess.run(
            ["sacctmgr", *args], env=env, input="n\n", capture_output=True, text=True,
            timeout=20, check=False,
        )  # fmt: skip

    write = answer_no("add", "account", "cfa_prompt", f"cluster={cluster}")
    assert "Would you like to commit changes? (You have 30 seconds to decide)" in write.stdout
    assert write.stdout.rstrip().endswith("Changes Discarded")
    assert write.returncode == 0  # discarded, yet rc 0
    assert mgr.rows("show", "account", "cfa_prompt", "format=account") == []
    # `show account where cluster=X` without withassoc prompts too, and "n" aborts (rc 0).
    read = answer_no("-P", "-n", "show", "account", "where", f"cluster={cluster}")
    assert "only valid when querying with the withassoc option" in read.stdout
    assert read.stdout.rstrip().endswith("Aborted")
    assert read.returncode == 0
    # With -i: no prompt at all.
    ok = mgr.run("-P", "-n", "show", "account", "where", f"cluster={cluster}", "format=account")
    assert "(N/y)" not in ok.stdout
    assert "root" in ok.stdout.split()  # (the cluster filter is ignored: every account)
    # -Q changes none of these messages.
    quiet = mgr.run("-Q", "add", "account", "cfa_prompt", f"cluster={cluster}")
    assert quiet.stdout.startswith(" Adding Account(s)")
    again = mgr.fails("-Q", "add", "account", "cfa_prompt", f"cluster={cluster}")
    assert lines_of(again.stdout) == ["Nothing new added."]


def test_unreachable_slurmdbd_fails_fast_with_rc_1(
    slurm_accounting: SlurmAccounting,
    tmp_path: Path,
) -> None:
    conf = tmp_path / "slurm.conf"
    text = slurm_accounting.slurm_conf.read_text()
    conf.write_text(re.sub(r"(?m)^AccountingStoragePort=.*$", "AccountingStoragePort=1", text))
    env = {**slurm_accounting.client_env(), "SLURM_CONF": str(conf)}
    started = time.monotonic()
    read = subprocess.run(
        ["sacctmgr", "-i", "-P", "-n", "show", "qos", "format=name"], env=env,
        capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert read.returncode == 1  # an empty read with rc 1 is NOT an empty state
    assert read.stdout == ""
    assert "Connection refused" in read.stderr
    assert elapsed < 2.0


def test_call_latency_with_the_nodelay_shim(mgr: Mgr) -> None:
    assert mgr.slurm.env.get("LD_PRELOAD")
    def median(*args: str, rc: int) -> float:
        times = []
        for _ in range(5):
            started = time.monotonic()
            mgr.run(*args, rc=rc)
            times.append(time.monotonic() - started)
        return statistics.median(times)

    read = median("-P", "-n", "show", "qos", QOS_FORMAT, rc=0)
    failing = median("remove", "user", "where", "name=cfu_nobody", rc=1)
    # Typically 10-40 ms each; the bounds only catch a lost shim (~0.3 s) or auth retries (2 s).
    assert read < 0.25, read
    assert failing < 0.25, failing


def test_sudo_n_fails_fast_without_a_password(slurm_accounting: SlurmAccounting) -> None:
    sudo = shutil.which("sudo")
    if sudo is None:
        # Not installed: the reconciler sees FileNotFoundError and must report it as such.
        with pytest.raises(FileNotFoundError):
            subprocess.run(["sudo", "-n", "true"], check=False, capture_output=True)
        return
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root + setpriv to impersonate an unprivileged user")
    started = time.monotonic()
    result = subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "sudo", "-n", "true"],
        capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip() == "sudo: a password is required"
    assert time.monotonic() - started < 2.0
    # sudo resets the environment: SLURM_CONF and LD_PRELOAD do not reach sacctmgr ...
    env = slurm_accounting.client_env()
    seen = subprocess.run(
        ["sudo", "-n", "env"], env=env, capture_output=True, text=True, timeout=10, check=True
    ).stdout
    assert "SLURM_CONF=" not in seen and "LD_PRELOAD=" not in seen
    # ... unless passed as VAR=value arguments (root, or a sudoers SETENV rule).
    direct = slurm_accounting.sacctmgr("-i", "-P", "-n", "show", "cluster", "format=cluster")
    passed = subprocess.run(
        ["sudo", "-n", f"SLURM_CONF={env['SLURM_CONF']}", "sacctmgr", "-i", "-P", "-n", "show",
         "cluster", "format=cluster"],
        env=env, capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    assert passed.stdout == direct.stdout

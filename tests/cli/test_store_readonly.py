"""A read-only data directory or a full disk (issue 28 item 7): every command says so in
one line (no "internal error"), and ``db check`` still checks the store's files.

Real file systems, as root, in a private mount namespace (``unshare -m``): the data
directory bound read-only over itself, or a tiny tmpfs filled to the last byte. The
embedded store is made and stopped with the CLI in a temporary directory; the namespace
ends with the script, so nothing outside it ever sees either mount."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHEETO = Path(sys.executable).parent / "cheeto"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="needs root and unshare(1) for a private mount namespace")


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHEETO_", "XDG_"))}
    return env | {"HOME": str(home), "XDG_CONFIG_HOME": str(home / "c"),
                  "XDG_DATA_HOME": str(home / "d"), "XDG_STATE_HOME": str(home / "s"),
                  "XDG_RUNTIME_DIR": str(home / "r")}


def _config(tmp_path: Path, data: Path) -> Path:
    cfg = tmp_path / f"{data.name}.yaml"
    cfg.write_text(f"mongo:\n  default:\n    embedded:\n      path: {data}\n")
    return cfg


def _in_namespace(tmp_path: Path, setup: str, cfg: Path) -> dict[str, str]:
    """Run ``setup`` then three commands in a private mount namespace; their outputs."""
    c = f"{shlex.quote(str(CHEETO))} --config {shlex.quote(str(cfg))}"
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    script = "\n".join([
        "set -u", setup,
        f"{c} ng site list > {out}/list.out 2> {out}/list.err; echo $? > {out}/list.rc",
        f"{c} ng site new -s late --fqdn late.example.org > {out}/new.out 2> {out}/new.err;"
        f" echo $? > {out}/new.rc",
        f"{c} db check --json > {out}/check.out 2> {out}/check.err; echo $? > {out}/check.rc",
        f"{c} db stop > /dev/null 2>&1 || true"])
    subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                   env=_env(tmp_path / "home"), timeout=240, check=True)
    return {p.name: p.read_text() for p in out.iterdir()}


def _make_store(tmp_path: Path, cfg: Path) -> None:
    env = _env(tmp_path / "home")
    for argv in (["ng", "site", "new", "-s", "farm", "--fqdn", "farm.example.org"],
                 ["db", "stop"]):
        r = subprocess.run([str(CHEETO), "--config", str(cfg), *argv], env=env, timeout=120,
                           capture_output=True, text=True, check=False)
        assert r.returncode == 0, r.stderr


def _assert_one_clear_line(found: dict[str, str], name: str, words: str) -> None:
    err = found[f"{name}.err"]
    assert found[f"{name}.rc"].strip() == "1", err
    assert len(err.strip().splitlines()) == 1, err
    assert words in err and "internal error" not in err and "Traceback" not in err


def _assert_files_checked(found: dict[str, str], words: str) -> None:
    assert found["check.rc"].strip() == "0", found["check.err"] + found["check.out"]
    report = json.loads(found["check.out"])
    assert report["ok"] is True and report["files_only"] is True
    checks = {row["check"]: row for row in report["checks"]}
    assert checks["file"]["status"] == "ok", checks["file"]
    assert checks["documents"]["status"] == "skipped" and words in checks["documents"]["detail"]


def test_a_read_only_data_directory(tmp_path):
    data = tmp_path / "store"
    cfg = _config(tmp_path, data)
    _make_store(tmp_path, cfg)
    d = shlex.quote(str(data))
    found = _in_namespace(tmp_path, f"mount --bind {d} {d} && mount -o remount,bind,ro {d}",
                          cfg)
    for name in ("list", "new"):
        _assert_one_clear_line(found, name, "read-only file system")
    _assert_files_checked(found, "read-only file system")


def test_a_full_disk(tmp_path):
    data = tmp_path / "full"
    data.mkdir()
    cfg = _config(tmp_path, data)
    d = shlex.quote(str(data))
    c = f"{shlex.quote(str(CHEETO))} --config {shlex.quote(str(cfg))}"
    # the store is made on the tmpfs itself (its marker records the file's inode there),
    # stopped, and then the disk is filled
    setup = "\n".join([
        f"mount -t tmpfs -o size=16m tmpfs {d}",
        f"{c} ng site new -s farm --fqdn farm.example.org > /dev/null 2>&1",
        f"{c} db stop > /dev/null 2>&1",
        f"dd if=/dev/zero of={d}/fill bs=64k > /dev/null 2>&1 || true"])
    found = _in_namespace(tmp_path, setup, cfg)
    for name in ("list", "new"):
        _assert_one_clear_line(found, name, "full disk")
    _assert_files_checked(found, "full disk")

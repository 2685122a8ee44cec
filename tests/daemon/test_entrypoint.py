"""``docker-entrypoint.sh`` run for real (as root, under dash) against a temporary root
with fake mounts: what it copies, with which owners and modes, that munged really runs
with the copied key, which variables it exports (checked with ``ssh -G``), that it drops
privileges and ``exec``s the given command. Plus static checks of the Dockerfile, whose
image cannot be built here (no Docker engine)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENTRYPOINT = REPO / "docker-entrypoint.sh"
BAKED = REPO / "deploy" / "known_hosts.github"
NOBODY = pwd.getpwnam("nobody")
MUNGE = pwd.getpwnam("munge")
FAKE_CHEETO = """#!/bin/sh
for last in "$@"; do :; done
if [ "${last:-}" = --key-path ]; then  # the entrypoint asks where the token key is
    [ -n "${REAL_CHEETO:-}" ] && exec "$REAL_CHEETO" "$@"
    echo store; exit 0
fi
printf 'pid=%s\\nuid=%s\\ngid=%s\\ngroups=%s\\n' "$$" "$(id -u)" "$(id -g)" "$(id -G)"
for a in "$@"; do printf 'arg=%s\\n' "$a"; done
env | grep -E '^(GIT_|MUNGE_SOCKET=|HOME=)' | sed 's/^/env:/'
exit "${FAKE_EXIT:-0}"
"""


@dataclass
class Result:
    code: int
    pid: int
    stdout: str
    stderr: str

    @property
    def args(self) -> list[str]:
        return [line[4:] for line in self.stdout.splitlines() if line.startswith("arg=")]

    def value(self, key: str) -> str | None:
        for line in self.stdout.splitlines():
            if line.startswith(f"{key}="):
                return line.split("=", 1)[1]
        return None

    @property
    def env(self) -> dict[str, str]:
        pairs = [line[4:].split("=", 1) for line in self.stdout.splitlines()
                 if line.startswith("env:")]
        return dict(pairs)


@pytest.fixture
def root() -> Iterator[Path]:
    """A root others can traverse (munged and the dropped user read from it)."""
    path = Path(tempfile.mkdtemp(prefix="cheeto-root-", dir="/tmp"))
    path.chmod(0o755)
    (path / "bin").mkdir()
    fake = path / "bin" / "cheeto"
    fake.write_text(FAKE_CHEETO)
    fake.chmod(0o755)
    (path / "etc" / "cheeto" / "ssh").mkdir(parents=True)
    shutil.copy(BAKED, path / "etc" / "cheeto" / "ssh" / "known_hosts.github")
    (path / "run" / "cheeto").mkdir(parents=True)
    # A copy the dropped user can read: the checkout itself may not be (a 0700 home or
    # clone directory), and a container's entrypoint is world-readable anyway.
    shutil.copy(ENTRYPOINT, path / "docker-entrypoint.sh")
    (path / "docker-entrypoint.sh").chmod(0o755)
    try:
        yield path
    finally:
        pidfile = path / "run" / "munge" / "munged.pid"
        if pidfile.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                pid = int(pidfile.read_text().strip())
                os.kill(pid, signal.SIGTERM)
                for _ in range(100):
                    if not Path(f"/proc/{pid}").exists():
                        break
                    time.sleep(0.05)
        shutil.rmtree(path, ignore_errors=True)


def run(root: Path, *args: str, prefix: tuple[str, ...] = (), **env: str) -> Result:
    full = {"PATH": f"{root / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin", "ROOT": str(root),
            "HOME": "/var/lib/cheeto", **env}
    proc = subprocess.Popen([*prefix, "/bin/sh", str(root / "docker-entrypoint.sh"), *args],
                            env=full,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=60)
    return Result(proc.returncode, proc.pid, out, err)


def mount_munge_key(root: Path) -> Path:
    key = root / "run" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o644)
    return key


def mount_git_key(root: Path) -> Path:
    key = root / "run" / "cheeto" / "git-ssh-key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "deploy", "-f",
                    str(key)], check=True)
    key.chmod(0o640)
    return key


def owner_mode(path: Path) -> tuple[str, int]:
    info = path.stat()
    return pwd.getpwuid(info.st_uid).pw_name, stat.S_IMODE(info.st_mode)


def test_everything_mounted(root):
    munge_key, git_key = mount_munge_key(root), mount_git_key(root)
    (root / "run" / "cheeto" / "known_hosts").write_text(
        "git.example.org ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA4bKDVCT1xpdoOQnaq3xNHe6/gFEh8s"
        "OUZTYG16h5Sh\n")
    r = run(root, "daemon", "worker", "--site", "farm", CHEETO_RUN_AS="nobody")
    assert r.code == 0, r.stderr

    # exec'd as the given command, as the unprivileged user, with no extra groups
    assert r.args == ["daemon", "worker", "--site", "farm"]
    assert int(r.value("pid")) == r.pid  # exec: the same process all the way down
    assert (r.value("uid"), r.value("gid")) == (str(NOBODY.pw_uid), str(NOBODY.pw_gid))
    assert r.value("groups") == str(NOBODY.pw_gid)

    # munge: a copy owned by munge, 0400; the mount untouched; munged answers with it
    installed = root / "etc" / "munge" / "munge.key"
    assert installed.read_bytes() == munge_key.read_bytes()
    assert owner_mode(installed) == ("munge", 0o400)
    assert owner_mode(munge_key) == ("root", 0o644)
    assert owner_mode(root / "etc" / "munge") == ("munge", 0o700)
    socket_path = root / "run" / "munge" / "munge.socket.2"
    assert r.env["MUNGE_SOCKET"] == str(socket_path)
    pid = int((root / "run" / "munge" / "munged.pid").read_text())
    assert Path(f"/proc/{pid}").stat().st_uid == MUNGE.pw_uid
    cred = subprocess.run(["munge", "-n", "-S", str(socket_path)], capture_output=True,
                          text=True, check=True).stdout
    subprocess.run(["unmunge", "-S", str(socket_path)], input=cred, capture_output=True,
                   text=True, check=True)

    # git: the key copied 0400 for the user cheeto runs as; the mount untouched
    ssh_dir = root / "var" / "lib" / "cheeto" / "ssh"
    git_id = ssh_dir / "git_id"
    assert git_id.read_bytes() == git_key.read_bytes()
    assert owner_mode(git_id) == ("nobody", 0o400)
    assert owner_mode(ssh_dir) == ("nobody", 0o700)
    assert owner_mode(git_key) == ("root", 0o640)
    baked = root / "etc" / "cheeto" / "ssh" / "known_hosts.github"
    mounted = root / "run" / "cheeto" / "known_hosts"
    command = r.env["GIT_SSH_COMMAND"]
    assert command == (f"ssh -i '{git_id}' -o IdentitiesOnly=yes -o BatchMode=yes "
                       f"-o StrictHostKeyChecking=yes -o UpdateHostKeys=no "
                       f"-o 'UserKnownHostsFile={baked} {mounted}'")
    effective = ssh_config(command)
    assert effective["stricthostkeychecking"] == "true"
    assert effective["userknownhostsfile"] == f"{baked} {mounted}"  # adds to the baked
    assert effective["identityfile"] == str(git_id)
    assert effective["identitiesonly"] == "yes" and effective["batchmode"] == "yes"
    assert (r.env["GIT_AUTHOR_NAME"], r.env["GIT_COMMITTER_NAME"]) == ("cheeto-daemon",
                                                                       "cheeto-daemon")
    assert "munged started" in r.stderr and "git deploy key installed" in r.stderr


def ssh_config(command: str) -> dict[str, str]:
    """What ssh makes of GIT_SSH_COMMAND (git runs it through the shell, like this)."""
    argv = shlex.split(command)
    out = subprocess.run([*argv, "-G", "git@github.com"], capture_output=True, text=True,
                         check=True).stdout
    config: dict[str, str] = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        config.setdefault(key, value)
    return config


def test_nothing_mounted_just_execs(root):
    r = run(root, "ng", "user", "show", "-u", "o'neil", "", "two words", CHEETO_RUN_AS="root",
            GIT_AUTHOR_NAME="someone")
    assert r.code == 0, r.stderr
    assert r.args == ["ng", "user", "show", "-u", "o'neil", "", "two words"]
    assert r.value("uid") == "0"
    assert "GIT_SSH_COMMAND" not in r.env and "MUNGE_SOCKET" not in r.env
    assert not (root / "etc" / "munge").exists()
    assert not (root / "var" / "lib" / "cheeto" / "ssh").exists()
    assert r.stderr == ""


def test_default_is_cmd_help_and_exit_code_propagates(root):
    r = run(root, "--help", CHEETO_RUN_AS="root", FAKE_EXIT="3")
    assert (r.code, r.args) == (3, ["--help"])


def test_without_a_mounted_known_hosts_only_the_baked_keys(root):
    mount_git_key(root)
    r = run(root, "daemon", "worker", CHEETO_RUN_AS="root")
    assert r.code == 0, r.stderr
    baked = root / "etc" / "cheeto" / "ssh" / "known_hosts.github"
    assert ssh_config(r.env["GIT_SSH_COMMAND"])["userknownhostsfile"] == str(baked)
    assert owner_mode(root / "var" / "lib" / "cheeto" / "ssh" / "git_id") == ("root", 0o400)


def test_no_host_keys_at_all_is_refused(root):
    mount_git_key(root)
    (root / "etc" / "cheeto" / "ssh" / "known_hosts.github").unlink()
    r = run(root, "daemon", "worker", CHEETO_RUN_AS="root")
    assert r.code == 1 and r.args == []
    assert "no SSH host keys" in r.stderr and "always verified" in r.stderr


def test_munge_needs_root(root):
    mount_munge_key(root)
    r = run(root, "daemon", "worker", "--site", "farm",
            prefix=("setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}",
                    "--clear-groups", "--"))
    assert r.code == 1 and r.args == []
    assert "munged must be started by root: run the container with --user 0" in r.stderr
    assert not (root / "etc" / "munge").exists()


def test_an_unprivileged_start_keeps_its_user(root):
    mount_git_key(root)
    (root / "var" / "lib" / "cheeto" / "ssh").mkdir(parents=True)
    os.chown(root / "var" / "lib" / "cheeto" / "ssh", NOBODY.pw_uid, NOBODY.pw_gid)
    (root / "run" / "cheeto" / "git-ssh-key").chmod(0o644)  # readable by the mount's users
    r = run(root, "daemon", "api", prefix=("setpriv", f"--reuid={NOBODY.pw_uid}",
                                           f"--regid={NOBODY.pw_gid}", "--clear-groups", "--"))
    assert r.code == 0, r.stderr
    assert r.value("uid") == str(NOBODY.pw_uid)
    assert owner_mode(root / "var" / "lib" / "cheeto" / "ssh" / "git_id") == ("nobody", 0o400)


def test_bad_run_as_user(root):
    r = run(root, "daemon", "beat", CHEETO_RUN_AS="no-such-user")
    assert r.code == 1 and "CHEETO_RUN_AS: no user no-such-user" in r.stderr


def test_numeric_run_as(root):
    r = run(root, "daemon", "beat", CHEETO_RUN_AS="4321:4322")
    assert r.code == 0, r.stderr
    assert (r.value("uid"), r.value("gid")) == ("4321", "4322")


def test_script_is_posix_sh():
    assert ENTRYPOINT.read_text().startswith("#!/bin/sh\n")
    assert os.access(ENTRYPOINT, os.X_OK)
    for shell in ("dash", "bash"):
        args = [shell, "--posix", "-n"] if shell == "bash" else [shell, "-n"]
        subprocess.run([*args, str(ENTRYPOINT)], check=True)
    text = ENTRYPOINT.read_text()
    assert "set -eu" in text and text.rstrip().endswith('exec cheeto "$@"')
    assert "[[" not in text.replace("[[:space:]", "")  # no bashisms


# -- the image, statically -------------------------------------------------------------------

GITHUB_FINGERPRINTS = {  # docs.github.com: "GitHub's SSH key fingerprints"
    "SHA256:+DiY3wvvV6TuJJhbpZisF/zLDA0zPMSvHdkr4UvCOqU (ED25519)",
    "SHA256:p2QAMXNIC1TJYWeIOttrVc98/R1BUFWu3/LiyKgUfQM (ECDSA)",
    "SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s (RSA)",
}


def test_baked_github_keys_match_the_published_fingerprints():
    out = subprocess.run(["ssh-keygen", "-lf", str(BAKED)], capture_output=True, text=True,
                         check=True).stdout
    found = {f"{line.split()[1]} {line.split()[-1]}" for line in out.splitlines()}
    assert found == GITHUB_FINGERPRINTS


def test_dockerfile_shape():
    text = (REPO / "Dockerfile").read_text()
    stages = [line for line in text.splitlines() if line.startswith("FROM ")]
    assert len(stages) == 2 and all("${PYTHON_IMAGE}" in s for s in stages)
    assert "ARG PYTHON_IMAGE=python:3.13-slim-bookworm" in text
    assert "poetry install --only main" in text
    assert "USER cheeto" in text and "USER root" not in text
    assert "HEALTHCHECK" in text and '"daemon", "healthcheck"' in text
    assert 'ENTRYPOINT ["docker-entrypoint.sh"]' in text and 'CMD ["--help"]' in text
    assert "deploy/known_hosts.github /etc/cheeto/ssh/known_hosts.github" in text
    assert "rm -f /etc/munge/munge.key" in text
    for copied in ("pyproject.toml", "poetry.lock", "README.md", "cheeto_like",
                   "docker-entrypoint.sh", "deploy/known_hosts.github"):
        assert (REPO / copied).exists(), copied
    ignored = (REPO / ".dockerignore").read_text().split()
    assert ".git" in ignored and ".venv" in ignored and "!README.md" in ignored


# -- the API's token key must outlive the container (issue 25) ---------------------------------

REAL_CHEETO = str(Path(sys.executable).parent / "cheeto")
ANONYMOUS = "/var/lib/docker/volumes/" + "3f" * 32 + "/_data"


def key_setup(root: Path, *mounts: tuple[str, Path], **api: str) -> dict[str, str]:
    """A config with ``api`` settings, a fake mountinfo (the container's root plus
    ``mounts``: (source root, mount point)), and the image's STATE_DIRECTORY."""
    state = root / "var" / "lib" / "cheeto" / "state"
    state.mkdir(parents=True, exist_ok=True)
    config = root / "etc" / "cheeto" / "config.yaml"
    lines = ["api:", "  default:"] + [f"    {k}: {v}" for k, v in api.items()]
    config.write_text("\n".join(lines if api else ["api:", "  default: {}"]) + "\n")
    info = ["21 1 0:40 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u"]
    for n, (source, point) in enumerate(mounts):
        shown = str(point).replace(" ", "\\040")
        info.append(f"{30 + n} 21 254:1 {source} {shown} rw,relatime - ext4 /dev/vda1 rw")
    (root / "mountinfo").write_text("\n".join(info) + "\n")
    return {"REAL_CHEETO": REAL_CHEETO, "CHEETO_CONFIG": str(config), "CHEETO_RUN_AS": "root",
            "MOUNTINFO": str(root / "mountinfo"), "STATE_DIRECTORY": str(state)}


def refused(r: Result, *fragments: str) -> None:
    assert r.code == 2, (r.code, r.stdout, r.stderr)
    assert r.args == [], r.stdout  # cheeto itself never started
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def state_dir(root: Path) -> Path:
    return root / "var" / "lib" / "cheeto" / "state"


def test_api_key_on_the_containers_own_layer_is_refused(root):
    env = key_setup(root)
    r = run(root, "daemon", "api", "--host", "0.0.0.0", **env)
    refused(r, "not on a volume", str(state_dir(root) / "jwt.key"), "api.jwt_key: store")


def test_api_key_on_an_anonymous_volume_is_refused(root):
    env = key_setup(root, (ANONYMOUS, state_dir(root)))
    refused(run(root, "daemon", "api", **env), "anonymous volume", "cheeto-api-state")


def test_api_key_on_a_named_volume_starts(root):
    env = key_setup(root, ("/var/lib/docker/volumes/cheeto-api-state/_data", state_dir(root)))
    r = run(root, "--profile", "default", "daemon", "api", "--host", "0.0.0.0", **env)
    assert r.code == 0, r.stderr
    assert r.args == ["--profile", "default", "daemon", "api", "--host", "0.0.0.0"]


def test_api_key_on_a_host_directory_or_a_mounted_key_file_starts(root):
    env = key_setup(root, ("/srv/cheeto/state", state_dir(root)))
    assert run(root, "daemon", "api", **env).code == 0
    key = root / "etc" / "cheeto" / "jwt.key"  # the operator's one key, bind-mounted
    env = key_setup(root, ("/etc/cheeto/jwt.key", key), jwt_key_file=str(key))
    r = run(root, "daemon", "api", **env)
    assert (r.code, r.args) == (0, ["daemon", "api"]), r.stderr


def test_a_store_kept_key_needs_no_volume(root):
    env = key_setup(root, jwt_key="store")
    r = run(root, "daemon", "api", **env)
    assert (r.code, r.args) == (0, ["daemon", "api"]), r.stderr


def test_other_roles_quick_paths_and_the_escape_hatch_need_no_volume(root):
    env = key_setup(root)
    assert run(root, "daemon", "worker", **env).args == ["daemon", "worker"]
    assert run(root, "daemon", "api", "--help", **env).args == ["daemon", "api", "--help"]
    r = run(root, "daemon", "api", CHEETO_EPHEMERAL_KEY="1", **env)
    assert (r.code, r.args) == (0, ["daemon", "api"]), r.stderr


def test_a_config_it_cannot_read_is_cheetos_one_line(root):
    env = key_setup(root)
    Path(env["CHEETO_CONFIG"]).write_text("api:\n  default:\n    jwt_key: nowhere\n")
    r = run(root, "daemon", "api", **env)
    refused(r, "jwt_key")


def test_dockerfile_keeps_state_on_a_volume():
    text = (REPO / "Dockerfile").read_text()
    assert 'VOLUME ["/var/lib/cheeto/state"]' in text
    assert "STATE_DIRECTORY=/var/lib/cheeto/state" in text
    assert "install -d -o cheeto -g cheeto -m 0700 /var/lib/cheeto/state" in text
    assert (REPO / "docs" / "deployment-containers.md").is_file()

"""Shell completion: the bash and zsh scripts run in a real bash / zsh, calling the real
console script (command words from the static table, options, names read from the test
store)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


def bash_complete(script: Path, words: list[str], cword: int, *, config: Path,
                  cache: Path) -> list[str]:
    """Source the script in bash, set COMP_WORDS/COMP_CWORD, run the function."""
    quoted = " ".join(f"'{w}'" for w in words)
    program = (f"source {script}\nCOMP_WORDS=({quoted})\nCOMP_CWORD={cword}\n"
               "_cheeto_complete\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n")
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "CHEETO_CONFIG": str(config),
           "XDG_CACHE_HOME": str(cache)}
    done = subprocess.run(["bash", "--norc", "--noprofile", "-c", program], env=env,
                          capture_output=True, text=True, timeout=60, check=True)
    return [line for line in done.stdout.splitlines() if line]


# zsh without a line editor: compinit gives the script its compdef; compadd and _files
# (what the function calls on a TAB) become functions that print what they were given.
_ZSH_RUN = r"""autoload -Uz compinit && compinit -u -D
source "$1"
compadd() { print -rl -- "${@[${@[(i)--]}+1,-1]}"; }
_files() { print -r -- "<files>"; }
print -r -- "<registered:${_comps[cheeto]}>"
CURRENT=$2
shift 2
words=("$@")
_cheeto_complete
"""


def zsh_complete(script: Path, words: list[str], cword: int, *, config: Path,
                 cache: Path) -> list[str]:
    """Source the script in zsh, set words/CURRENT (1-based), run the function; the first
    line of the result says which function compdef registered for ``cheeto``."""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "CHEETO_CONFIG": str(config),
           "XDG_CACHE_HOME": str(cache)}
    done = subprocess.run(["zsh", "-f", "-c", _ZSH_RUN, "zsh", str(script), str(cword + 1),
                           *words], env=env, capture_output=True, text=True, timeout=60,
                          check=True)
    assert done.stderr == ""
    return [line for line in done.stdout.splitlines() if line]


@pytest.fixture
async def bash_script(cli, tmp_path) -> Path:
    if shutil.which("bash") is None:  # pragma: no cover - bash is a system dependency
        pytest.fail("bash is needed for the completion tests")
    r = await cli("completion", "bash")
    assert r.code == 0 and "complete -o bashdefault -o default -F _cheeto_complete cheeto" \
        in r.stdout
    path = tmp_path / "cheeto.bash"
    path.write_text(r.stdout)
    return path


async def test_bash_completes_command_words_and_options(bash_script, cli_config, tmp_path):
    def run(words: list[str]) -> list[str]:
        return bash_complete(bash_script, words, len(words) - 1, config=cli_config,
                             cache=tmp_path / "cache")

    assert {"help", "completion", "config", "daemon", "db", "ng"} <= set(run(["cheeto", ""]))
    assert run(["cheeto", "ng", "use"]) == ["user"]
    assert run(["cheeto", "ng", "user", "sh"]) == ["shell", "show"]
    assert run(["cheeto", "ng", "slurm", "assoc", "sh"]) == ["show"]  # through an alias
    assert run(["cheeto", "--config", "x.yaml", "ng", "user", "new", "c"]) == ["class"]
    assert run(["cheeto", "ng", "user", "show", "--u"]) == ["--uid", "--user"]
    assert run(["cheeto", "ng", "user", "list", "--status", "o"]) == ["offboarding"]
    assert run(["cheeto", "ng", "--log-level", "W"]) == ["WARNING"]
    assert run(["cheeto", "ng", "--log-format", ""]) == ["text", "json"]
    assert run(["cheeto", "completion", ""]) == ["bash", "zsh"]  # a positional's choices
    # the options were cached: a second call reads them without importing the module
    assert (tmp_path / "cache" / "cheeto" / "completion-options.json").exists()
    assert run(["cheeto", "ng", "user", "show", "--e"]) == ["--email"]


async def test_bash_completes_names_from_the_store(bash_script, cli, cli_config, db,
                                                   tmp_path):
    r = await cli("ng", "site", "new", "-s", "farm", "--fqdn", "farm.example.org")
    assert r.code == 0, r.stderr
    for name, uid in (("alice", 2001), ("alfred", 2002), ("bob", 2003)):
        r = await cli("ng", "user", "new", "generic", "-u", name, "--email",
                      f"{name}@example.org", "--fullname", f"{name.title()} X", "--uid", str(uid))
        assert r.code == 0, r.stderr

    def run(words: list[str], cword: int | None = None) -> list[str]:
        return bash_complete(bash_script, words, len(words) - 1 if cword is None else cword,
                             config=cli_config, cache=tmp_path / "cache")

    assert run(["cheeto", "ng", "user", "show", "-u", "al"]) == ["alfred", "alice"]
    assert run(["cheeto", "ng", "user", "show", "--user", ""]) == ["alfred", "alice", "bob"]
    # bash splits --site=fa at '=' (COMP_WORDBREAKS)
    assert run(["cheeto", "ng", "site", "show", "--site", "=", "fa"]) == ["farm"]
    assert run(["cheeto", "ng", "group", "show", "-g", "b"]) == ["bob"]  # personal group


async def test_a_store_that_does_not_answer_completes_nothing(bash_script, tmp_path):
    config = tmp_path / "down.yaml"
    config.write_text("mongo:\n  default:\n    uri: mongodb://127.0.0.1:9/?directConnection=true"
                      "\n    timeout_seconds: 0.5\n")
    words = ["cheeto", "ng", "user", "show", "-u", "a"]
    assert bash_complete(bash_script, words, 5, config=config, cache=tmp_path / "c") == []


async def test_zsh_script_registers_the_function(cli):
    r = await cli("completion", "zsh")
    assert r.code == 0 and r.stdout.startswith("#compdef cheeto")
    assert "compdef _cheeto_complete cheeto" in r.stdout and "__complete" in r.stdout
    r = await cli("completion", "fish")
    assert r.code == 2 and "invalid choice: 'fish'" in r.stderr


async def test_zsh_completes_words_options_and_names(cli, cli_config, db, tmp_path):
    if shutil.which("zsh") is None:  # pragma: no cover - zsh is a system dependency
        pytest.fail("zsh is needed for the completion tests (scripts/install-system-deps.sh)")
    r = await cli("completion", "zsh")
    assert r.code == 0
    script = tmp_path / "cheeto.zsh"
    script.write_text(r.stdout)
    for name, uid in (("alice", 2001), ("alfred", 2002), ("bob", 2003)):
        r = await cli("ng", "user", "new", "generic", "-u", name, "--email",
                      f"{name}@example.org", "--fullname", f"{name.title()} X", "--uid", str(uid))
        assert r.code == 0, r.stderr

    def run(*words: str) -> list[str]:
        found = zsh_complete(script, ["cheeto", *words], len(words), config=cli_config,
                             cache=tmp_path / "cache")
        assert found[0] == "<registered:_cheeto_complete>"
        return found[1:]

    assert run("ng", "us") == ["usage", "user"]
    assert run("ng", "user", "sh") == ["shell", "show"]
    assert run("ng", "user", "show", "--u") == ["--uid", "--user"]
    assert run("ng", "user", "show", "-u", "al") == ["alfred", "alice"]
    assert run("ng", "user", "show", "--user", "") == ["alfred", "alice", "bob"]
    # zsh keeps --opt=value in one word, so the candidates keep the option too
    assert run("ng", "user", "show", "--user=b") == ["--user=bob"]
    assert run("ng", "--log-level=W") == ["--log-level=WARNING"]
    # nothing from cheeto (a file argument): the script falls back to zsh's file completion
    assert run("ng", "--config", "") == ["<files>"]

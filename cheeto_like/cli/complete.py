"""Shell completion: the scripts ``cheeto completion bash|zsh`` prints, and the hidden
``cheeto __complete CWORD WORDS…`` they call on every TAB.

Command words come from the static table (no command module is imported). A command's
options need its module, which is slow to import, so they are read once and cached per
version of the CLI's source files under ``$XDG_CACHE_HOME/cheeto/``. Site, user and
group names are read from the store only if it already runs and answers within a short
time; any failure prints nothing (completion must never print an error into a prompt).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from .. import version as package_version
from .registry import NODES, Node

if TYPE_CHECKING:
    import argparse

# A table node -> its loaded parser (imports the command's module). ``app.main`` hands
# its own in, so this module never imports ``app`` (which imports it: an import loop).
ParserOf = Callable[[Node], "argparse.ArgumentParser"]

STORE_TIMEOUT_S = 1.5
MAX_NAMES = 500

# Options every node has (app._common_args/_ng_args): option -> kind of value (None: flag).
_COMMON: dict[str, str | None] = {
    "--config": "file", "--profile": "profile", "-p": "profile", "--log": "file",
    "--log-level": "choice", "--log-format": "choice", "--quiet": None, "-q": None,
    "--help": None, "-h": None,
}
_LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]
_LOG_FORMATS = ["text", "json"]
# Without a command's own option table, these names mean the same thing everywhere.
_BY_NAME = {"--site": "site", "-s": "site", "--user": "user", "-u": "user",
            "--group": "group", "-g": "group"}
_BY_METAVAR = {"SITE": "site", "USER": "user", "GROUP": "group"}
_COLLECTIONS = {"site": "sites", "user": "users", "group": "groups"}


@dataclass
class Option:
    strings: list[str]
    kind: str | None  # None: a flag; "site"/"user"/"group"/"choice"/"file"/"value"
    choices: list[str] = field(default_factory=list)


@dataclass
class _Tree:
    node: Node | None
    children: dict[str, _Tree] = field(default_factory=dict)  # names and aliases


def _tree() -> _Tree:
    root = _Tree(None)
    for node in NODES:
        parent = root
        for word in node.words[:-1]:
            parent = parent.children[word]
        child = _Tree(node)
        for name in (node.words[-1], *node.aliases):
            parent.children[name] = child
    return root


# -- a command's options (cached) -------------------------------------------------------


def _source_signature() -> str:
    here = Path(__file__).parent
    parts = [package_version()]
    for path in sorted([*here.glob("*.py"), *here.glob("ng/*.py"),
                        here.parent / "constants.py"]):
        stat = path.stat()
        parts.append(f"{path.name}:{stat.st_mtime_ns}:{stat.st_size}")
    return "|".join(parts)


def _cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cheeto" / "completion-options.json"


def _read_options(node: Node, parser_of: ParserOf) -> list[Option]:
    """Import the command's module and read its parser (slow; the result is cached)."""
    import argparse

    parser = parser_of(node)
    options = []
    for action in parser._actions:
        if not action.option_strings:  # a positional: only its choices are known
            if action.choices and not isinstance(action, argparse._SubParsersAction):
                options.append(Option([], "choice", [str(c) for c in action.choices]))
            continue
        if action.nargs == 0:
            kind = None
        elif action.choices:
            kind = "choice"
        else:
            metavar = action.metavar if isinstance(action.metavar, str) else None
            kind = _BY_METAVAR.get(metavar or "") or next(
                (_BY_NAME[s] for s in action.option_strings if s in _BY_NAME), "value")
            if metavar in ("FILE", "PATH", "DIR"):
                kind = "file"
        choices = [str(c) for c in action.choices] if action.choices else []
        if isinstance(action, argparse._HelpAction):
            kind = None
        options.append(Option(list(action.option_strings), kind, choices))
    return options


def command_options(node: Node, parser_of: ParserOf) -> list[Option]:
    path = _cache_path()
    signature = _source_signature()
    cache: dict[str, Any] = {}
    try:
        cache = json.loads(path.read_text())
        if cache.get("signature") != signature:
            cache = {}
    except (OSError, ValueError):
        cache = {}
    entry = cache.get("commands", {}).get(node.path)
    if entry is not None:
        return [Option(o["strings"], o["kind"], o["choices"]) for o in entry]
    options = _read_options(node, parser_of)
    cache = {"signature": signature, "commands": cache.get("commands", {})}
    cache["commands"][node.path] = [o.__dict__ for o in options]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache))
        tmp.replace(path)
    except OSError:
        pass
    return options


def _node_options(tree: _Tree, parser_of: ParserOf) -> dict[str, Option]:
    if tree.node is not None and tree.node.module is not None:
        options = command_options(tree.node, parser_of)
    else:
        options = [Option([name], kind, _common_choices(name))
                   for name, kind in _COMMON.items()]
        if tree.node is not None and tree.node.words[0] == "ng":
            options.append(Option(["--author"], "value"))
    return {s: o for o in options for s in o.strings}


def _common_choices(name: str) -> list[str]:
    return {"--log-level": _LOG_LEVELS, "--log-format": _LOG_FORMATS}.get(name, [])


# -- names from the store ---------------------------------------------------------------


def _option_value(words: list[str], names: tuple[str, ...]) -> str | None:
    for i, word in enumerate(words):
        for name in names:
            if word == name and i + 1 < len(words):
                return words[i + 1]
            if word.startswith(name + "="):
                return word.split("=", 1)[1]
    return None


def _profiles(words: list[str]) -> list[str]:
    from ..config import _read_yaml, resolve_config_path

    path, _ = resolve_config_path(_option_value(words, ("--config",)))
    data = _read_yaml(path) if path.exists() else {}
    found = {"default"}
    for section in ("mongo", "ldap", "daemon", "api"):
        if isinstance(data.get(section), dict):
            found.update(str(k) for k in data[section])
    return sorted(found)


def store_names(kind: str, prefix: str, words: list[str]) -> list[str]:
    """Names of sites, users or groups starting with ``prefix``, or [] on any trouble."""
    import asyncio

    from ..config import load_config
    from ..store import connect

    config = load_config(_option_value(words, ("--config",)),
                         _option_value(words, ("--profile", "-p")))

    async def read() -> list[str]:
        store = await connect(config.mongo, autostart=False, create_indexes=False)
        try:
            cursor = store.database[_COLLECTIONS[kind]].find({}, {"name": 1, "_id": 0})
            names = [doc["name"] async for doc in cursor if "name" in doc]
        finally:
            await store.close()
        return sorted(n for n in names if n.startswith(prefix))[:MAX_NAMES]

    async def bounded() -> list[str]:
        return await asyncio.wait_for(read(), STORE_TIMEOUT_S)

    return asyncio.run(bounded())


# -- the completion itself --------------------------------------------------------------


def candidates(words: list[str], cword: int, parser_of: ParserOf) -> list[str]:
    """What may replace ``words[cword]`` (``words[0]`` is the program)."""
    words = list(words) + [""] * max(0, cword + 1 - len(words))
    current, before = words[cword], words[1:cword]
    value_of: str | None = None
    keep = ""  # zsh keeps --opt=value in one word; bash splits it at '='
    if current == "=" and before:
        value_of, current = before[-1], ""
    elif len(before) >= 2 and before[-1] == "=":
        value_of = before[-2]
    elif current.startswith("-") and "=" in current:
        value_of, _, current = current.partition("=")
        keep = value_of + "="

    tree = _tree()
    node, skip = tree, False
    for word in before:
        if skip:
            skip = False
            continue
        if word.startswith("-"):
            option = _node_options(node, parser_of).get(word)
            skip = option is not None and option.kind is not None
            continue
        if word in node.children and (node.node is None or node.node.module is None):
            node = node.children[word]
    options = _node_options(node, parser_of)
    if value_of is None and before and before[-1].startswith("-"):
        option = options.get(before[-1])
        if option is not None and option.kind is not None:
            value_of = before[-1]
    if value_of is not None:
        option = options.get(value_of)
        return [keep + v for v in _values(option, current, words)] if option else []
    if current.startswith("-"):
        return sorted(s for s in options if s.startswith(current) and s.startswith("--")) or \
            sorted(s for s in options if s.startswith(current))
    if node.node is None or node.node.module is None:
        return [name for name, child in node.children.items()
                if name.startswith(current) and name == child.node.words[-1]]  # type: ignore[union-attr]
    positional = [c for o in command_options(node.node, parser_of)
                  if not o.strings for c in o.choices]
    return [c for c in positional if c.startswith(current)]


def _values(option: Option, prefix: str, words: list[str]) -> list[str]:
    if option.kind == "choice":
        values = option.choices or next(
            (_common_choices(s) for s in option.strings if _common_choices(s)), [])
        return [c for c in values if c.startswith(prefix)]
    if option.kind == "profile":
        return [p for p in _profiles(words) if p.startswith(prefix)]
    if option.kind in _COLLECTIONS:
        return store_names(option.kind, prefix, words)
    return []  # files and free values: the shell's default completion


def complete(argv: list[str], out: IO[str], parser_of: ParserOf) -> int:
    """``cheeto __complete CWORD WORDS…``: one candidate a line; nothing on any error."""
    try:
        found = candidates(argv[1:], int(argv[0]), parser_of)
    except Exception:  # completion must never print an error into a prompt
        found = []
    if found:
        out.write("\n".join(found) + "\n")
    return 0


_BASH = r"""# cheeto completion for bash. Load it with: eval "$(cheeto completion bash)"
_cheeto_complete() {
    local IFS=$'\n'
    COMPREPLY=($("${COMP_WORDS[0]}" __complete "$COMP_CWORD" "${COMP_WORDS[@]}" \
        2>/dev/null))
}
complete -o bashdefault -o default -F _cheeto_complete cheeto
"""

_ZSH = r"""#compdef cheeto
# cheeto completion for zsh. Load it with: eval "$(cheeto completion zsh)"
_cheeto_complete() {
    local -a found
    found=("${(@f)$("${words[1]}" __complete $((CURRENT - 1)) "${words[@]}" 2>/dev/null)}")
    found=(${found:#})
    if (( ${#found} )); then
        compadd -- "${found[@]}"
    else
        _files
    fi
}
if (( ! $+functions[compdef] )); then
    autoload -Uz compinit && compinit
fi
compdef _cheeto_complete cheeto
"""


def script(shell: str) -> str:
    return _BASH if shell == "bash" else _ZSH

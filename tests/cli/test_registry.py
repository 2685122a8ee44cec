"""The static command table (``cli/registry.py``) against what the modules register, and
what a fast start-up needs: the fast paths import no command module and no heavy library.
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import pkgutil
import subprocess
import sys

import pytest

import cheeto_like.cli as cli_package
from cheeto_like.cli import app, load_commands, registry
from cheeto_like.cli.args import TIME_FORMATS


def _import_every_cli_module() -> None:
    """Every module under cheeto_like.cli, listed in the table or not."""
    load_commands()
    for info in pkgutil.walk_packages(cli_package.__path__, f"{cli_package.__name__}."):
        importlib.import_module(info.name)


def _row(kind: str, path: tuple[str, ...], module: str | None, help: str,
         aliases: tuple[str, ...]) -> str:
    args = [json.dumps(" ".join(path))]
    if module is not None:
        args.append(json.dumps(module.removeprefix("cheeto_like.cli.")))
    args.append(json.dumps(help, ensure_ascii=False))
    if aliases:
        args.append(f"aliases={aliases!r}")
    return f'{kind}({", ".join(args)}),'


def test_every_registered_command_has_the_same_table_row():
    _import_every_cli_module()
    table = {n.words: n for n in registry.NODES}
    for path, (module, help, aliases) in app.REGISTERED_COMMANDS.items():
        row = _row("C", path, module, help, aliases)
        node = table.get(path)
        assert node is not None, (
            f"`{' '.join(path)}` ({module}) has no row in cheeto_like/cli/registry.py; "
            f"add, after its parent:\n    {row}")
        assert (f"cheeto_like.cli.{node.module}", node.help, node.aliases) == \
            (module, help, aliases), f"registry.py row for `{node.path}` should read:\n{row}"


def test_every_container_has_the_same_table_row():
    _import_every_cli_module()
    table = {n.words: n for n in registry.NODES}
    for path, (help, aliases) in app.REGISTERED_GROUPS.items():
        row = _row("G", path, None, help, aliases)
        node = table.get(path)
        assert node is not None and node.module is None, (
            f"container `{' '.join(path)}` has no G row in cheeto_like/cli/registry.py; "
            f"add, after its parent:\n    {row}")
        assert (node.help, node.aliases) == (help, aliases), \
            f"registry.py row for `{node.path}` should read:\n{row}"


def test_every_table_row_is_registered_by_its_module():
    _import_every_cli_module()
    for node in registry.NODES:
        if node.module is None:
            assert node.words in app.REGISTERED_GROUPS, \
                f"registry.py lists container `{node.path}` but no module calls group_help"
        else:
            assert node.words in app.REGISTERED_COMMANDS, (
                f"registry.py lists `{node.path}` in cheeto_like.cli.{node.module}, which "
                "does not register it with @command")


def test_table_rows_are_unique_and_parents_come_first():
    seen: set[tuple[str, ...]] = set()
    for node in registry.NODES:
        assert node.words not in seen, f"duplicate row {node.path!r}"
        if len(node.words) > 1:
            parent = node.words[:-1]
            assert parent in seen, f"{node.path!r} comes before its parent"
            assert next(n for n in registry.NODES if n.words == parent).module is None
        seen.add(node.words)


HEAVY = ("beanie", "pymongo", "pydantic", "rich", "ruamel", "cheeto_like.models",
         "cheeto_like.config", "cheeto_like.store", "cheeto_like.cli.ng.user",
         "cheeto_like.cli.ng.user_read", "cheeto_like.operations.user",
         "cheeto_like.operations.base")

PROBE = """
import io, json, sys
from cheeto_like.cli import main
out, err = io.StringIO(), io.StringIO()
code = main(sys.argv[1:], stdout=out, stderr=err)
heavy = sorted({m.split('.')[0] if not m.startswith('cheeto_like') else m
                for m in sys.modules} & set(HEAVY))
print(json.dumps({"code": code, "heavy": heavy, "out": out.getvalue(), "err": err.getvalue()}))
"""


def _probe(*argv: str) -> dict:
    code = f"HEAVY = {HEAVY!r}\n{PROBE}"
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          check=True, timeout=60)
    return json.loads(done.stdout)


def test_help_version_group_help_and_the_tree_import_nothing_heavy():
    for argv in (["--help"], ["--version"], ["ng", "--help"], ["ng", "user"], ["help"],
                 ["completion", "bash"], ["__complete", "2", "cheeto", "ng", "us"]):
        result = _probe(*argv)
        assert result["heavy"] == [], (argv, result["heavy"])
        assert result["code"] in (0, 2), (argv, result)


def test_a_leaf_help_imports_only_its_module():
    result = _probe("ng", "user", "show", "--help")
    assert result["code"] == 0 and "--uid" in result["out"]
    assert "cheeto_like.cli.ng.user_read" in result["heavy"]
    assert "cheeto_like.cli.ng.user" not in result["heavy"]


def test_reading_a_user_imports_no_write_operation():
    """``ng user show``/``list`` live apart from ``ng user``'s writes (``ng/user_read.py``)
    so their start-up pays for no operation and its argument models (issue 31)."""
    for argv in (["ng", "user", "show", "--help"], ["ng", "user", "list", "--help"]):
        result = _probe(*argv)
        assert result["code"] == 0, result
        assert "cheeto_like.operations.user" not in result["heavy"], argv
        assert "cheeto_like.operations.base" not in result["heavy"], argv


def test_a_command_builds_only_the_parsers_on_its_path():
    """The table's parsers are added when first parsed, helped or looked up: resolving
    ``ng user show`` builds ``ng``'s and ``ng user``'s children, not ``ng site``'s."""
    code = ("import json\n"
            "from cheeto_like.cli import app\n"
            "app._find(('ng', 'user', 'show'))\n"
            "ng = app._subparsers(app._find(('ng',)))\n"
            "site = app._subparsers(ng.choices['site'])\n"
            "user = app._subparsers(ng.choices['user'])\n"
            "print(json.dumps([site is None, sorted(user.choices) if user else []]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    site_unbuilt, user_children = json.loads(done.stdout)
    assert site_unbuilt is True
    assert {"show", "list", "new", "add"} <= set(user_children)


def test_help_prints_every_path_with_its_help():
    result = _probe("help")
    lines = result["out"].splitlines()
    for node in registry.NODES:
        assert any(line.startswith(node.path + " ") or line == node.path for line in lines), \
            node.path
    assert any("ng user show" in line and "show a user" in line for line in lines)


def test_every_option_of_every_command_has_help():
    load_commands()
    app._apply_common_args()
    missing = []
    for _, parser, _ in app.commands.walk_subtree(None):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{parser.prog} {'/'.join(action.option_strings) or action.dest}")
    assert missing == [], "options without help:\n" + "\n".join(missing)


def test_every_command_takes_the_log_format():
    """``--log-format text|json`` is a common option (cli/app.py), on every node."""
    load_commands()
    app._apply_common_args()
    for _, parser, _ in app.commands.walk_subtree(None):
        found = [action for action in parser._actions if "--log-format" in action.option_strings]
        assert found and list(found[0].choices) == ["text", "json"], parser.prog


def test_status_options_list_their_choices():
    load_commands()
    app._apply_common_args()
    checked = 0
    for _, parser, _ in app.commands.walk_subtree(None):
        for action in parser._actions:
            if "--status" in action.option_strings:
                assert action.choices or "{" in (action.help or ""), parser.prog
                checked += 1
    assert checked >= 2


def test_every_time_option_says_its_format():
    """Every WHEN option lists the formats parse_when accepts (one shared text)."""
    load_commands()
    checked = 0
    for _, parser, _ in app.commands.walk_subtree(None):
        for action in parser._actions:
            if action.metavar == "WHEN":
                assert TIME_FORMATS in (action.help or ""), \
                    f"{parser.prog} {action.option_strings}: use args.when_help()"
                checked += 1
    assert checked >= 8


def test_a_table_row_without_its_registration_is_a_clear_error():
    with pytest.raises(RuntimeError, match="builtin does not register 'ng nothing-here'"):
        app.load_module_of(registry.C("ng nothing-here", "builtin", "x"))


def test_a_command_module_that_fails_to_import_is_one_line_exit_1():
    app._add_table_node(registry.C("ng zz-broken", "ng.does_not_exist", "a broken row"))
    try:
        err = io.StringIO()
        assert app.main(["ng", "zz-broken"], stderr=err, stdout=io.StringIO()) == 1
        assert err.getvalue().count("\n") == 1
        assert "internal error: ModuleNotFoundError" in err.getvalue()
    finally:
        sub = app._subparsers(app._find(("ng",)))
        del sub.choices["zz-broken"]
        sub._choices_actions = [a for a in sub._choices_actions if a.dest != "zz-broken"]

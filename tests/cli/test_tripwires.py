"""Conventions every command must keep (DESIGN §7)."""

from __future__ import annotations

import argparse

from cheeto_like.cli import load_commands
from cheeto_like.cli.app import commands


def _leaves() -> list[tuple[str, argparse.ArgumentParser]]:
    load_commands()
    found = []
    for _, parser, _ in commands.walk_subtree(None):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            found.append((parser.prog, parser))
    return found


def test_every_show_and_list_command_takes_yaml_and_json():
    checked = 0
    for prog, parser in _leaves():
        words = prog.split()[1:]
        if not {"show", "list", "history", "status"} & set(words):
            continue
        if words[:2] == ["ng", "user"] and words[-1] == "status":
            continue  # `ng user status` sets a status; it shows nothing
        flags = {opt for action in parser._actions for opt in action.option_strings}
        assert {"--yaml", "--json"} <= flags, prog
        checked += 1
    assert checked >= 8


def test_every_leaf_has_help():
    for prog, parser in _leaves():
        assert parser.description, prog

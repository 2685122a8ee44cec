"""Reading and writing the puppet repository's YAML."""

from __future__ import annotations

from pathlib import Path

import pytest

from cheeto_like.errors import InvalidInput
from cheeto_like.puppet.yamlio import dumps, load_file, loads


def test_zero_prefixed_ints_are_decimal(tmp_path: Path):
    path = tmp_path / "u.yaml"
    path.write_text("user:\n  alice:\n    uid: 0111111\n    gid: 08\n")
    assert load_file(path) == {"user": {"alice": {"uid": 111111, "gid": 8}}}


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n", "~\n"])
def test_empty_file_is_an_empty_map(tmp_path: Path, text: str):
    path = tmp_path / "empty.yaml"
    path.write_text(text)
    assert load_file(path) == {}


def test_missing_file_is_an_empty_map_unless_required(tmp_path: Path):
    assert load_file(tmp_path / "nope.yaml") == {}
    with pytest.raises(InvalidInput, match=r"nope\.yaml: no such file"):
        load_file(tmp_path / "nope.yaml", missing_ok=False)


def test_malformed_file_names_the_file_and_line(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text("user:\n  alice:\n    groups: [a, b\n    uid: 1\n")
    with pytest.raises(InvalidInput) as err:
        load_file(path)
    assert err.value.message.startswith(f"{path}:4: malformed YAML: ")
    assert err.value.exit_code == 2


def test_duplicate_keys_are_malformed():
    with pytest.raises(InvalidInput, match=r"^farm\.yaml:\d+: malformed YAML: .*duplicate"):
        loads("user:\n  alice: {}\n  alice: {}\n", name="farm.yaml")


def test_a_directory_is_not_a_yaml_file(tmp_path: Path):
    with pytest.raises(InvalidInput, match="is a directory"):
        load_file(tmp_path)


def test_dump_sorts_and_drops_empty_values_but_keeps_false():
    data = {"zeta": 1, "alpha": {"b": None, "a": [], "c": {}, "d": False, "e": 0,
                                 "f": {"only": None}}, "mid": ["x", None, {}]}
    assert dumps(data) == "alpha:\n  d: false\n  e: 0\nmid:\n- x\nzeta: 1\n"


def test_dump_quotes_long_strings_and_never_wraps():
    long = "ssh-ed25519 " + "A" * 300 + " someone@example.org"
    text = dumps({"short": "x" * 80, "long": long})
    assert f'long: "{long}"\n' in text
    assert f"short: {'x' * 80}\n" in text
    assert len(text.splitlines()) == 2


def test_dump_writes_sets_as_sorted_lists_and_round_trips():
    data = {"tags": {"b", "a"}, "user": {"alice": {"uid": 1, "expiry": "2025-01-02"}}}
    text = dumps(data)
    assert "tags:\n- a\n- b\n" in text
    assert loads(text) == {"tags": ["a", "b"], "user": {"alice": {"uid": 1,
                                                                   "expiry": "2025-01-02"}}}


def test_dump_of_nothing_is_an_empty_map():
    assert dumps({"user": {}, "group": None}) == "{}\n"
    assert loads(dumps({})) == {}

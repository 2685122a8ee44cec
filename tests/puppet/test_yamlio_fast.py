"""``yamlio.dumps`` writes the exports' shapes itself (issue 18: PyYAML's representer took
~10 s for a 20k-user site file); its output must equal PyYAML's byte for byte, so the
puppet repository's diffs never change with the writer. Hypothesis generates documents
of the exports' shapes with awkward strings (YAML words, numbers, dates, indicators,
quotes, long and non-ASCII values) and compares both writers."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cheeto_like.puppet import yamlio

AWKWARD_VALUES = [
    "yes", "No", "TRUE", "off", "null", "~", "y", "n", "=", "<<", "0111", "1e3", "0x1F",
    "2024-01-01", ".inf", "-", "- x", "a: b", "a #b", "#c", "@x", "!t", "*a", "&a", "%p",
    "'q'", '"d"', "back\\slash", " lead", "trail ", "", "tab\there", "é", "ünïcode",
    "rw,nosuid", "/export/home/x", "a@b.org", "$y$j9T$abc/def", "x" * 81,
    "$y$j9T$" + "a" * 90, "p" * 79 + '"', "ssh-ed25519 AAAA k" * 6, "[x]", "{x}", "a,b",
    "?", ":", "key:", "line\nbreak",
    "Export e00001", "Jane Doe-Smith", "a -b", "a - b", "a /b", "x y z", "yes no", "a  b",
    "a b ", "a #b", "a: b c", "O'Brien Pat", "a b" * 30]
AWKWARD = st.sampled_from(AWKWARD_VALUES)
TEXT = st.one_of(AWKWARD, st.text(max_size=12),
                 st.from_regex(r"[A-Za-z_/][A-Za-z0-9_./@+-]{0,20}", fullmatch=True),
                 st.from_regex(r"[A-Za-z_/][A-Za-z0-9_./@+ -]{0,30}", fullmatch=True))
SCALAR = st.one_of(TEXT, st.integers(-(2**40), 2**40), st.booleans(), st.none())
KEY = st.one_of(st.from_regex(r"[a-z][a-z0-9_-]{0,10}", fullmatch=True), AWKWARD)


def documents() -> st.SearchStrategy[Any]:
    leaf_lists = st.lists(SCALAR, max_size=4)
    inner = st.recursive(
        st.dictionaries(KEY, st.one_of(SCALAR, leaf_lists), max_size=4),
        lambda children: st.dictionaries(
            KEY, st.one_of(SCALAR, leaf_lists, children,
                           st.lists(children, max_size=3)), max_size=4),
        max_leaves=20)
    return st.dictionaries(KEY, inner, max_size=4)


@settings(max_examples=400, deadline=None)
@given(documents())
def test_the_fast_writer_matches_pyyaml(doc: dict[str, Any]) -> None:
    cleaned = yamlio.prune(doc)
    expected = "{}\n" if yamlio._is_empty(cleaned) else yamlio._libyaml_dump(cleaned)
    assert yamlio.dumps(doc) == expected
    assert yamlio.loads(yamlio.dumps(doc)) is not None


def test_unsupported_shapes_fall_back_to_pyyaml() -> None:
    doc = {"a": [[1, 2], [3]], "b": {1: "x"}, "c": 1.5}
    assert yamlio.dumps(doc) == yamlio._libyaml_dump(yamlio.prune(doc))


def test_the_fast_path_writes_an_export_shape_itself() -> None:
    doc = {"user": {"alice": {"groups": ["lab", "yes"], "uid": 1, "zfs": False,
                              "storage": [{"autofs": {"nas": "n", "path": "/p"}, "g": True}]}}}
    assert yamlio._fast_dump(yamlio.prune(doc)) == yamlio._libyaml_dump(yamlio.prune(doc))
    assert yamlio.dumps(doc) == (
        "user:\n  alice:\n    groups:\n    - lab\n    - 'yes'\n    storage:\n"
        "    - autofs:\n        nas: n\n        path: /p\n      g: true\n    uid: 1\n"
        "    zfs: false\n")


@pytest.mark.parametrize("value", AWKWARD_VALUES)
def test_every_awkward_string_is_written_as_pyyaml_writes_it(value: str) -> None:
    doc = {"k": value, "l": [value], "m": [{"n": value}]}
    cleaned = yamlio.prune(doc)
    assert yamlio.dumps(doc) == yamlio._libyaml_dump(cleaned)


def reference_prune(value: Any) -> Any:
    """``prune`` as first written (one recursive call per value), to pin the faster one."""
    if isinstance(value, dict):
        out = {}
        for key in sorted(value, key=str):
            item = reference_prune(value[key])
            if not yamlio._is_empty(item):
                out[key] = item
        return out
    if isinstance(value, set | frozenset):
        return sorted((reference_prune(v) for v in value if not yamlio._is_empty(v)), key=str)
    if isinstance(value, list | tuple):
        return [v for v in map(reference_prune, value) if not yamlio._is_empty(v)]
    return value


@settings(max_examples=300, deadline=None)
@given(st.recursive(
    SCALAR | st.sets(st.integers(0, 5)) | st.frozensets(TEXT, max_size=3),
    lambda children: st.lists(children, max_size=4) | st.tuples(children, children)
    | st.dictionaries(KEY | st.integers(0, 3), children, max_size=4), max_leaves=25))
def test_prune_matches_the_plain_recursive_version(value: Any) -> None:
    assert yamlio.prune(value) == reference_prune(value)

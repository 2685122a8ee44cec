"""The additive deep merge and the grouping of files into forests."""

from __future__ import annotations

import copy

from cheeto_like.puppet.merge import (
    MERGED_ALL,
    MergeStrategy,
    build_forests,
    deep_merge,
    merge_files,
    prefix_of,
)


def test_later_scalars_win():
    assert deep_merge({"a": 1, "b": "x"}, {"a": 2}, {"a": 3, "c": None}) == \
        {"a": 3, "b": "x", "c": None}


def test_lists_concatenate_without_deduplication():
    assert deep_merge({"g": ["a", "b"]}, {"g": ["b", "c"]}) == {"g": ["a", "b", "b", "c"]}


def test_sets_union():
    assert deep_merge({"s": {1, 2}}, {"s": {2, 3}}) == {"s": {1, 2, 3}}
    assert deep_merge({"s": {1}}, {"s": frozenset({2})}) == {"s": {1, 2}}


def test_a_later_type_replaces_an_earlier_one():
    assert deep_merge({"k": ["a"]}, {"k": {"x": 1}}) == {"k": {"x": 1}}
    assert deep_merge({"k": {"x": 1}}, {"k": "plain"}) == {"k": "plain"}
    assert deep_merge({"k": ["a"]}, {"k": ("b",)}) == {"k": ("b",)}
    assert deep_merge({"zfs": {"quota": "1G"}}, {"zfs": False}) == {"zfs": False}


def test_nested_mappings_recurse():
    common = {"user": {"alice": {"uid": 1, "groups": ["lab"], "shell": "/bin/bash"}}}
    site = {"user": {"alice": {"groups": ["gpu"], "shell": "/bin/zsh"},
                     "bob": {"uid": 2}}}
    assert deep_merge(common, site) == {"user": {
        "alice": {"uid": 1, "groups": ["lab", "gpu"], "shell": "/bin/zsh"},
        "bob": {"uid": 2}}}


def test_inputs_are_not_modified_or_shared():
    a = {"user": {"alice": {"groups": ["lab"]}}}
    b = {"user": {"alice": {"groups": ["gpu"]}, "bob": {"tag": ["x"]}}}
    a0, b0 = copy.deepcopy(a), copy.deepcopy(b)
    merged = deep_merge(a, b)
    merged["user"]["alice"]["groups"].append("new")
    merged["user"]["bob"]["tag"].append("new")
    assert a == a0 and b == b0


FILES = [
    ("dir/test-forest-1.yaml", {"user": {"a": {"uid": 1}}}),
    ("dir/test-forest-1.site.yaml", {"user": {"a": {"shell": "/bin/zsh"}}}),
    ("dir/test-forest-2.yaml", {"user": {"b": {"uid": 2}}}),
    ("dir/test-forest-2.site.yaml", {"user": {"b": {"shell": "/bin/sh"}}}),
]


def test_forest_all_merges_everything():
    [forest] = build_forests(FILES, MergeStrategy.ALL)
    assert forest.name == MERGED_ALL
    assert forest.files == [name for name, _ in FILES]
    assert forest.data == {"user": {"a": {"uid": 1, "shell": "/bin/zsh"},
                                    "b": {"uid": 2, "shell": "/bin/sh"}}}


def test_forest_none_keeps_files_apart():
    forests = build_forests(FILES, MergeStrategy.NONE)
    assert [f.name for f in forests] == [name for name, _ in FILES]
    assert [f.data for f in forests] == [data for _, data in FILES]


def test_forest_prefix_merges_files_sharing_a_basename_prefix():
    forests = build_forests(FILES, MergeStrategy.PREFIX)
    assert [(f.name, f.files) for f in forests] == [
        ("test-forest-1", ["dir/test-forest-1.yaml", "dir/test-forest-1.site.yaml"]),
        ("test-forest-2", ["dir/test-forest-2.yaml", "dir/test-forest-2.site.yaml"])]
    assert forests[0].data == {"user": {"a": {"uid": 1, "shell": "/bin/zsh"}}}
    assert prefix_of("/x/y/farm.site.yaml") == "farm"


def test_a_forest_names_the_files_behind_a_value():
    forest = merge_files("farm", [
        ("farm.yaml", {"user": {"alice": {"uid": 1, "shell": "/bin/bash",
                                          "groups": ["lab", "hpc"]}}}),
        ("farm.site.yaml", {"user": {"alice": {"shell": "/bin/zsh", "groups": ["gpu"]}}}),
        ("late.yaml", {"user": {"alice": {"uid": "replaced"}}}),
    ])
    assert forest.files_for(("user", "alice", "shell")) == ["farm.site.yaml"]
    assert forest.files_for(("user", "alice", "uid")) == ["late.yaml"]
    # a list item, by merged index or by value
    assert forest.files_for(("user", "alice", "groups", 1)) == ["farm.yaml"]
    assert forest.files_for(("user", "alice", "groups", 2)) == ["farm.site.yaml"]
    assert forest.files_for(("user", "alice", "groups"), "gpu") == ["farm.site.yaml"]
    # a record (or a field missing from it): everyone who wrote it
    assert forest.files_for(("user", "alice", "email")) == \
        ["farm.yaml", "farm.site.yaml", "late.yaml"]
    assert forest.files_for(("user", "nobody")) == forest.files
    assert forest.label(("user", "alice", "shell")) == "farm.site.yaml"


def test_a_replaced_list_is_blamed_on_its_replacer():
    forest = merge_files("x", [("a.yaml", {"tag": ["x"]}), ("b.yaml", {"tag": "scalar"}),
                               ("c.yaml", {"tag": ["y"]})])
    assert forest.data == {"tag": ["y"]}
    assert forest.files_for(("tag", 0)) == ["c.yaml"]


def test_a_non_mapping_top_level_replaces():
    forest = merge_files("x", [("a.yaml", {"user": {}}), ("b.yaml", ["not", "a", "map"])])
    assert forest.data == ["not", "a", "map"]

"""Deep additive merge of YAML trees, and grouping files into merged "forests".

The legacy repository layers files: ``alice.yaml`` holds the common record and
``alice.site.yaml`` adds what one site needs (more groups, a different shell). Merging is
additive so a site layer can *add* groups without repeating the common ones:

- mappings recurse key by key;
- lists concatenate (earlier items first; duplicates are kept, the schema de-duplicates
  the fields where order and repetition mean nothing);
- sets union;
- anything else, and any change of type, is replaced by the later value.

Inputs are never modified: the result shares no mutable containers with them.

A ``Forest`` keeps the files it was merged from, so a validation error in merged data
can still name the file an admin has to edit.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

MERGED_ALL = "merged-all"


class MergeStrategy(StrEnum):
    """How ``cheeto puppet validate`` groups its files before validating."""

    ALL = "ALL"  # every file into one forest, ``merged-all``
    PREFIX = "PREFIX"  # files sharing the basename part before the first '.'
    NONE = "NONE"  # every file on its own


def _same_kind(a: Any, b: Any) -> bool:
    return type(a) is type(b) or any(isinstance(a, kind) and isinstance(b, kind)
                                     for kind in (Mapping, set | frozenset))


def merge_into(dest: dict[Any, Any], src: Mapping[Any, Any]) -> dict[Any, Any]:
    """Merge ``src`` into ``dest`` in place (see the module docstring) and return it."""
    for key, new in src.items():
        if key not in dest or not _same_kind(dest[key], new):
            dest[key] = copy.deepcopy(new)
            continue
        old = dest[key]
        if isinstance(old, Mapping):
            if not isinstance(old, dict):
                old = dest[key] = dict(old)
            merge_into(old, new)
        elif isinstance(old, list):
            old.extend(copy.deepcopy(new))
        elif isinstance(old, tuple):
            dest[key] = old + copy.deepcopy(new)
        elif isinstance(old, set | frozenset):
            dest[key] = old | new
        else:
            dest[key] = copy.deepcopy(new)
    return dest


def deep_merge(*trees: Mapping[Any, Any]) -> dict[Any, Any]:
    """A new tree: ``trees`` merged left to right (later wins, containers add up)."""
    merged: dict[Any, Any] = {}
    for tree in trees:
        merge_into(merged, tree)
    return merged


@dataclass
class Forest:
    """One unit of validation: the merged data of one or more files, and the files
    themselves (in merge order) so problems can be traced back to them."""

    name: str
    data: Any
    layers: list[tuple[str, Any]] = field(default_factory=list)

    @property
    def files(self) -> list[str]:
        return [name for name, _ in self.layers]

    def files_for(self, loc: Sequence[Any], value: Any = None) -> list[str]:
        """The files responsible for the value at ``loc`` (a key path, possibly ending in
        a list index or a key that is missing): the last writer of a scalar, the file
        that contributed a list item (by index, or by ``value``), every contributor to
        a mapping, or to a record with a missing field."""
        parts = tuple(loc)
        while parts and all(_lookup(data, parts) is _MISSING for _, data in self.layers):
            parts = parts[:-1]
        if not parts:
            return self.files
        contributors: list[tuple[str, Any]] = []
        for name, data in self.layers:
            found = _lookup(data, parts)
            if found is _MISSING:
                continue
            if contributors and (not _same_kind(contributors[-1][1], found)
                                 or not isinstance(found, Mapping | list | set | frozenset)):
                contributors = []  # replaced, not added to
            contributors.append((name, found))
        rest = tuple(loc)[len(parts):]
        if isinstance(contributors[-1][1], list):
            if rest and isinstance(rest[0], int):
                offset = 0
                for name, items in contributors:
                    if rest[0] < offset + len(items):
                        return [name]
                    offset += len(items)
            if value is not None:
                holders = [name for name, items in contributors if value in items]
                if holders:
                    return holders
        return [name for name, _ in contributors]

    def label(self, loc: Sequence[Any] = (), value: Any = None) -> str:
        return ", ".join(self.files_for(loc, value)) or self.name


_MISSING = object()


def _lookup(data: Any, parts: Sequence[Any]) -> Any:
    for part in parts:
        if not isinstance(data, Mapping) or isinstance(part, int):
            return _MISSING
        match = [k for k in data if str(k) == str(part)]
        if not match:
            return _MISSING
        data = data[match[0]]
    return data


def merge_files(name: str, files: Iterable[tuple[str, Any]]) -> Forest:
    """Merge loaded ``(file name, data)`` pairs, in order, into one forest."""
    forest = Forest(name=name, data={})
    for file_name, data in files:
        forest.layers.append((file_name, data))
        if isinstance(data, Mapping) and isinstance(forest.data, Mapping):
            merge_into(forest.data, data)
        else:  # a top level that is not a mapping replaces, and fails validation later
            forest.data = copy.deepcopy(data)
    return forest


def prefix_of(file_name: str) -> str:
    """``farm.site.yaml`` -> ``farm``: the basename before its first '.'."""
    return Path(file_name).name.split(".", 1)[0]


def build_forests(files: Sequence[tuple[str, Any]], strategy: MergeStrategy) -> list[Forest]:
    """Group loaded files into forests, in the order the files were given."""
    if strategy is MergeStrategy.ALL:
        return [merge_files(MERGED_ALL, files)]
    if strategy is MergeStrategy.NONE:
        return [merge_files(name, [(name, data)]) for name, data in files]
    groups: dict[str, list[tuple[str, Any]]] = {}
    for name, data in files:
        groups.setdefault(prefix_of(name), []).append((name, data))
    return [merge_files(prefix, members) for prefix, members in groups.items()]

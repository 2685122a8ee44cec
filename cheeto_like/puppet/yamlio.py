"""Read and write YAML the way the puppet.hpc repository expects.

Reading is ruamel's safe loader (YAML 1.2), so ``0111111`` is the decimal 111111, the way
uids were written by hand in the legacy repository, never an octal surprise. A missing
or empty file loads as ``{}`` because the repository's site files are optional layers;
a malformed file is an ``InvalidInput`` that names the file and the line, so an admin can
jump straight to it.

Writing is deterministic, so a regenerated file only differs where the data does: keys
sorted, null/``{}``/``[]`` dropped (``false`` is a value and stays), sets as sorted
lists, long strings double-quoted and no line wrapping (puppet diffs stay one line per
value).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from ruamel.yaml import YAML, YAMLError
from ruamel.yaml.error import MarkedYAMLError

from ..errors import InvalidInput

LONG_STRING = 80  # longer strings are written double-quoted
WIDTH = 1 << 30  # "no wrapping": libyaml wants a C int


def _safe_yaml() -> YAML:
    return YAML(typ="safe", pure=True)


def _where(exc: MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    return f":{mark.line + 1}" if mark is not None else ""


def loads(text: str, *, name: str = "<string>") -> Any:
    """Parse YAML text; an empty document is ``{}``. ``name`` labels errors."""
    try:
        data = _safe_yaml().load(text)
    except MarkedYAMLError as exc:
        problem = exc.problem or exc.context or "malformed YAML"
        raise InvalidInput(f"{name}{_where(exc)}: malformed YAML: {problem}") from None
    except YAMLError as exc:
        raise InvalidInput(f"{name}: malformed YAML: {exc}") from None
    return {} if data is None else data


def load_file(path: str | Path, *, missing_ok: bool = True) -> Any:
    """Load one YAML file. A missing file is ``{}`` unless ``missing_ok`` is false (a
    file named on a command line that does not exist is a typo, not an empty layer)."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        if missing_ok:
            return {}
        raise InvalidInput(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InvalidInput(f"{path}: is a directory, not a YAML file") from None
    except UnicodeDecodeError:
        raise InvalidInput(f"{path}: not a UTF-8 text file") from None
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read ({exc.strerror})") from None
    return loads(text, name=str(path))


def _is_empty(value: Any) -> bool:
    cls = type(value)
    if cls is str or cls is int or cls is bool:
        return False
    if cls is dict or cls is list:  # skip the abstract-class check below (it is slow)
        return not value
    return value is None or (isinstance(value, Mapping | list | tuple | set | frozenset)
                             and len(value) == 0)


def prune(value: Any) -> Any:
    """Drop null, ``{}`` and ``[]`` recursively (a mapping emptied by pruning goes too),
    sort mapping keys and turn sets into sorted lists. ``False`` and ``0`` stay."""
    cls = type(value)
    if cls is str or cls is int or cls is bool:  # most values: nothing to do
        return value
    if cls is dict or isinstance(value, Mapping):
        keys = list(value)
        if all(type(k) is str for k in keys):
            keys.sort()  # the same order as sorting by str(), without a call per key
        else:
            keys.sort(key=str)
        out = {}
        for key in keys:
            item = value[key]
            kind = type(item)
            if kind is str or kind is int or kind is bool:  # a leaf: kept as it is
                out[key] = item
            elif item is not None:  # (the call per leaf was a third of a site's dump)
                item = prune(item)
                if not _is_empty(item):
                    out[key] = item
        return out
    if isinstance(value, set | frozenset):
        return sorted((prune(v) for v in value if not _is_empty(v)), key=str)
    if isinstance(value, list | tuple):
        kept = []
        for item in value:
            kind = type(item)
            if kind is str or kind is int or kind is bool:
                kept.append(item)
            elif item is not None:
                item = prune(item)
                if not _is_empty(item):
                    kept.append(item)
        return kept
    return value


class _LongString(str):
    """A string the emitter must double-quote."""


def _quote_long(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _quote_long(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_quote_long(v) for v in value]
    if isinstance(value, str) and len(value) > LONG_STRING:
        return _LongString(value)
    return value


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """libyaml's emitter when available: a 10k-user site file is written ~7x faster than
    with ruamel's pure-Python emitter (block style, sequences at their key's indent)."""


_Dumper.add_representer(_LongString, lambda dumper, value: dumper.represent_scalar(
    "tag:yaml.org,2002:str", str(value), style='"'))


def dumps(data: Any) -> str:
    """Serialise ``data`` in the repository's style (see the module docstring)."""
    cleaned = prune(data)
    if _is_empty(cleaned):
        return "{}\n"
    try:
        return _fast_dump(cleaned)
    except _Unsupported:
        return _libyaml_dump(cleaned)


def _libyaml_dump(cleaned: Any) -> str:
    return yaml.dump(_quote_long(cleaned), Dumper=_Dumper, default_flow_style=False,
                     sort_keys=False, width=WIDTH, allow_unicode=True)


# -- the fast path --------------------------------------------------------------------------
# A 20k-user site file is ~6 MB; PyYAML's representer (Python even with libyaml's emitter)
# spent ~10 s on it. The shapes the exports produce (mappings with string keys, lists of
# scalars or mappings, strings, ints, booleans) are written here directly, exactly as
# PyYAML writes them; a string whose plain form is not obviously safe is rendered by
# PyYAML itself (memoised), and any other shape falls back to PyYAML for the whole
# document. tests/puppet/test_yamlio_fast.py compares both on generated data.


class _Unsupported(Exception):
    """A value the fast path does not write; ``dumps`` falls back to PyYAML."""


# starts with a letter, _ or /, then no space, quote, colon, #, comma or bracket: never an
# indicator, never read back as a number, date or merge key (those start otherwise)
_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./@+-]*")
# ...except the YAML 1.1 booleans and nulls PyYAML resolves (case-insensitively, to be safe)
_RESOLVED_WORDS = frozenset({"yes", "no", "true", "false", "on", "off", "null", "y", "n"})
# ...and the same words joined by single spaces (full names): PyYAML writes those plain
# too, and no YAML 1.1 resolver matches a value that starts with a letter and has a space
_PLAIN_WORDS = re.compile(r"[A-Za-z_/][A-Za-z0-9_./@+-]*(?: [A-Za-z0-9_./@+-]+)+")
_PRINTABLE_ASCII = re.compile(r"[ -~]*")


@functools.lru_cache(maxsize=65536)
def _rendered_by_pyyaml(value: str) -> str:
    text = _libyaml_dump({"k": value})
    if not text.startswith("k: ") or text.count("\n") != 1:
        raise _Unsupported(value)
    return text[3:-1]


def _scalar(value: Any) -> str:
    if type(value) is str and len(value) <= LONG_STRING:
        if _PLAIN.fullmatch(value):
            if value.lower() not in _RESOLVED_WORDS:
                return value
        elif _PLAIN_WORDS.fullmatch(value):
            return value
        return _rendered_by_pyyaml(value)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is int:
        return str(value)
    if type(value) is not str and not isinstance(value, str):
        raise _Unsupported(type(value).__name__)
    if len(value) > LONG_STRING:
        if _PRINTABLE_ASCII.fullmatch(value) and '"' not in value and "\\" not in value:
            return f'"{value}"'
        return _rendered_by_pyyaml(str(value))
    if _PLAIN.fullmatch(value) and value.lower() not in _RESOLVED_WORDS:
        return value
    return _rendered_by_pyyaml(str(value))


def _key(value: Any) -> str:
    if type(value) is str and value in _SAFE_KEYS:  # field names: checked once
        return value
    if (type(value) is str and _PLAIN.fullmatch(value)
            and value.lower() not in _RESOLVED_WORDS):
        if len(_SAFE_KEYS) < 4096:
            _SAFE_KEYS.add(value)
        return value
    raise _Unsupported(repr(value))


_SAFE_KEYS: set[str] = set()


def _fast_mapping(data: Mapping[Any, Any], indent: int, out: list[str], *,
                  inline_first: bool = False) -> None:
    pad = " " * indent
    lead = "" if inline_first else pad
    for key, item in data.items():
        name = _key(key)
        cls = type(item)
        if cls is str or cls is int or cls is bool:  # most values: no abstract-class check
            out.append(f"{lead}{name}: {_scalar(item)}\n")
        elif cls is dict or isinstance(item, Mapping):
            out.append(f"{lead}{name}:\n")
            _fast_mapping(item, indent + 2, out)
        elif cls is list:
            out.append(f"{lead}{name}:\n")
            _fast_sequence(item, indent, out)  # PyYAML: a mapping's list is not indented
        else:
            out.append(f"{lead}{name}: {_scalar(item)}\n")
        lead = pad


def _fast_sequence(items: list[Any], indent: int, out: list[str]) -> None:
    pad = " " * indent
    for item in items:
        if type(item) is dict or isinstance(item, Mapping):
            out.append(f"{pad}- ")
            _fast_mapping(item, indent + 2, out, inline_first=True)
        elif isinstance(item, list | tuple | set | frozenset):
            raise _Unsupported("a list in a list")
        else:
            out.append(f"{pad}- {_scalar(item)}\n")


def _fast_dump(cleaned: Any) -> str:
    if not isinstance(cleaned, Mapping):
        raise _Unsupported(type(cleaned).__name__)
    out: list[str] = []
    _fast_mapping(cleaned, 0, out)
    return "".join(out)

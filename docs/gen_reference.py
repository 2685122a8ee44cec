"""The docs site's reference pages, generated from the code so they cannot drift.

``reference/config.md`` walks the pydantic config models (``cheeto_like.config``),
``reference/cli.md`` the command table (``cli/registry.py`` NODES) and each command's
argparse options, ``reference/tasks.md`` the daemon's task table
(``daemon/config.py`` TASKS) with their config blocks, and ``reference/api.md`` the REST
API's OpenAPI document (``create_api(...).openapi()``, no store needed).

``pages()`` returns ``{path under docs/: markdown}``; ``docs/hooks.py`` (registered in
``mkdocs.yml``) adds them to every build, so they are never written into ``docs/``.
``python docs/gen_reference.py OUT_DIR`` writes them to a directory, for reading.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import io
import logging
import re
import sys
import tempfile
import tokenize
import types
import typing
from pathlib import Path
from typing import Any

GENERATED_NOTE = ("*Generated from the code at build time (`docs/gen_reference.py`); "
                  "do not edit.*\n")


def _cell(text: object) -> str:
    """One markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _prose(text: object) -> str:
    """A prose cell: HTML-looking words such as ``<site>`` shown, not swallowed."""
    return _cell(str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))


def _code(text: object) -> str:
    value = " ".join(str(text).split())
    if not value:
        return ""
    fence = "``" if "`" in value else "`"
    pad = " " if "`" in value else ""
    # Python-Markdown's tables split no row inside a code span: its pipes stay unescaped
    return f"{fence}{pad}{value}{pad}{fence}"


def _doc(obj: object) -> str:
    """The object's own docstring (not one inherited from pydantic's BaseModel)."""
    doc = vars(obj).get("__doc__") if isinstance(obj, type) else getattr(obj, "__doc__", "")
    return inspect.cleandoc(doc or "").strip()


def _first_paragraph(obj: object) -> str:
    return " ".join(_doc(obj).split("\n\n")[0].split())


# --- config ---------------------------------------------------------------------------

def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _type_name(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(annotation))
    if origin is not None:
        args = ", ".join(_type_name(a) for a in typing.get_args(annotation))
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{args}]" if args else name
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _models_in(annotation: Any) -> list[tuple[str, type]]:
    """Config models a field holds: ('', M) directly, ('.<key>', M) in a dict,
    ('[]', M) in a list."""
    from pydantic import BaseModel

    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models_in(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [found for a in typing.get_args(annotation) for found in _models_in(a)]
    if origin is dict:
        return [(".<name>" + suffix, model)
                for suffix, model in _models_in(typing.get_args(annotation)[1])]
    if origin in (list, tuple, set, frozenset):
        return [("[]" + suffix, model)
                for a in typing.get_args(annotation) if a is not Ellipsis
                for suffix, model in _models_in(a)]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [("", annotation)]
    return []


def _comments(model: type) -> dict[str, str]:
    """Field name -> the source's comment on it, in the class or a base class that
    declares it (comments are not kept at run time)."""
    found: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if "model_fields" in dir(cls) and cls.__module__.startswith("cheeto_like"):
            found.update(_own_comments(cls, set(model.model_fields)))
    return found


def _own_comments(model: type, names: set[str]) -> dict[str, str]:
    """The comment at the end of a field's line, after the comment lines just above it."""
    try:
        source = inspect.getsource(model)
    except (OSError, TypeError):
        return {}
    by_line: dict[int, str] = {}
    code_lines: set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                by_line[token.start[0]] = token.string.lstrip("#").strip()
            elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                                    tokenize.DEDENT):
                code_lines.add(token.start[0])
    except (tokenize.TokenError, SyntaxError):
        return {}
    found: dict[str, str] = {}
    above: list[str] = []
    for number, line in enumerate(source.splitlines(), start=1):
        stripped = line.strip()
        if number in by_line and number not in code_lines:
            above.append(by_line[number])
            continue
        match = re.match(r"    (\w+)\s*:", line)
        if match and match.group(1) in names:
            parts = [*above, by_line.get(number, "")]
            text = " ".join(part for part in parts if part)
            if text:
                found[match.group(1)] = text
        if stripped:
            above = []
    return found


def skeleton_comments() -> dict[str, str]:
    """Dotted key -> the comment ``cheeto config write``'s skeleton puts after it
    (commented-out keys too; ``mongo.default.x`` is ``mongo.<profile>.x``)."""
    from cheeto_like.config import PROFILED_SECTIONS, SKELETON

    found: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in SKELETON.splitlines():
        text, indent = line, 0
        while True:
            lead = len(text) - len(text.lstrip(" "))
            text, indent = text[lead:], indent + lead
            if not text.startswith("#"):
                break
            text = text[2:] if text.startswith("# ") else text[1:]
        match = re.match(r"([a-z_]+):(.*)$", text)
        if not match:
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match.group(1)))
        path = [key for _, key in stack]
        if len(path) > 1 and path[0] in PROFILED_SECTIONS and path[1] == "default":
            path[1] = "<profile>"
        comment = re.search(r"(?:^|\s)#\s?(.*)$", match.group(2))
        # a comment going on from the line above ("or token_file ...") is not this key's
        if comment and comment.group(1).strip() and not re.match(r"(or|and) ", comment.group(1)):
            found.setdefault(".".join(path), comment.group(1).strip())
    return found


def _default(field: Any) -> str:
    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    if field.default_factory is not None:
        try:
            value = field.default_factory()
        except TypeError:  # a factory taking the validated data
            return "(computed)"
        if isinstance(value, BaseModel):
            return "(the block's defaults)"
    elif field.default is PydanticUndefined:
        return "**required**"
    else:
        value = field.default
    if value is None:
        return "null (absent)"
    if isinstance(value, BaseModel):
        return "(the block's defaults)"
    if isinstance(value, Path):  # the builder's home is no one else's
        return _code(str(value).replace(str(Path.home()), "~", 1))
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return _code(text)


def config_page() -> str:
    from cheeto_like.config import PROFILED_SECTIONS, Config

    out = ["# Configuration reference", "", GENERATED_NOTE,
           "One YAML file (`cheeto config write` writes a commented skeleton; "
           "`cheeto config show` prints the resolved one). "
           f"The sections {', '.join(f'`{s}`' for s in sorted(PROFILED_SECTIONS))} are maps "
           "of profile name to block (`--profile`/`CHEETO_PROFILE`, falling back to "
           "`default`): write `mongo: {default: {...}}`. Every block refuses unknown keys.",
           ""]
    seen: set[str] = set()
    skeleton = skeleton_comments()

    def walk(model: type, where: str, level: int) -> None:
        if where in seen or level > 6:
            return
        seen.add(where)
        heading = "#" * min(level, 6)
        out.extend([f"{heading} `{where}`", ""])
        doc = _doc(model)
        if doc:
            out.extend([doc, ""])
        out.extend(["| key | type | default | meaning |", "|---|---|---|---|"])
        children: list[tuple[str, type]] = []
        comments = _comments(model)
        for name, field in model.model_fields.items():
            if where == "" and name in ("path", "profile"):
                continue
            key = field.alias or name
            models = _models_in(field.annotation)
            meaning = (field.description or comments.get(name)
                       or skeleton.get(f"{where}.{key}", ""))
            cell = _prose(meaning)
            if models:
                target = f"{where}.{key}" if where else key
                cell = (cell + " " if cell else "") + "see " + ", ".join(
                    f"`{target}{suffix}`" for suffix, _ in models)
                children.extend((f"{target}{suffix}", m) for suffix, m in models)
            out.append(f"| `{key}` | {_code(_type_name(field.annotation))} | "
                       f"{_default(field)} | {cell} |")
        out.append("")
        for child_where, child in children:
            walk(child, child_where, level + 1)

    for name, field in Config.model_fields.items():
        if name in ("path", "profile"):
            continue
        for suffix, model in _models_in(field.annotation):
            shown = f"{name}.<profile>" if name in PROFILED_SECTIONS else name
            walk(model, shown + suffix, 2)
    return "\n".join(out) + "\n"


def config_sections() -> list[str]:
    """The top-level section names (what the config reference must name)."""
    from cheeto_like.config import Config

    return [name for name in Config.model_fields if name not in ("path", "profile")]


# --- cli ------------------------------------------------------------------------------

def _load_all_commands() -> None:
    from cheeto_like.cli import registry

    for node in registry.NODES:
        if node.module:
            importlib.import_module(f"cheeto_like.cli.{node.module}")
    from cheeto_like.cli import app

    app._apply_common_args()


def _option_rows(parser: argparse.ArgumentParser, *, common: bool) -> list[str]:
    rows: list[str] = []
    for group in parser._action_groups:
        is_common = group.title == "common options"
        if is_common != common:
            continue
        for action in group._group_actions:
            if action.dest == "author" and not common:
                continue  # every ng command takes it: listed once with the common options
            if action.help == argparse.SUPPRESS or isinstance(
                    action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            name = ", ".join(action.option_strings) or action.dest
            if action.option_strings and action.nargs != 0:
                name += f" {action.metavar or action.dest.upper()}"
            helptext = action.help or ""
            if action.choices:
                helptext += f" (one of: {', '.join(map(str, action.choices))})"
            if isinstance(helptext, str) and "%(" in helptext:
                try:
                    helptext = helptext % {"default": action.default, "prog": parser.prog,
                                           "choices": action.choices}
                except (KeyError, ValueError, TypeError):
                    pass
            rows.append(f"| {_code(name)} | {_cell(helptext)} |")
    return rows


def cli_page() -> str:
    from cheeto_like.cli import app, registry

    _load_all_commands()
    out = ["# Command reference", "", GENERATED_NOTE,
           "Every command of `cheeto`, from the command table (`cli/registry.py`) and each "
           "command's parser. `cheeto help` prints the tree; `cheeto <command> --help` "
           "a command's options.", ""]
    common_rows: list[str] = []
    body: list[str] = []
    for node in registry.NODES:
        depth = min(len(node.words) + 1, 6)
        body.extend([f"{'#' * depth} `cheeto {node.path}`", "", node.help[:1].upper()
                     + node.help[1:] + ".", ""])
        if node.aliases:
            body.extend([f"Aliases: {', '.join(f'`{a}`' for a in node.aliases)}.", ""])
        if node.module is None:
            continue
        parser = app._find(node.words)
        if parser is None:
            continue
        if not common_rows:
            common_rows = _option_rows(parser, common=True)
        rows = _option_rows(parser, common=False)
        if rows:
            body.extend(["| option | meaning |", "|---|---|", *rows, ""])
    if common_rows:
        out.extend(["## Common options", "", "Every command also takes:", "",
                    "| option | meaning |", "|---|---|", *common_rows, "",
                    "Every `cheeto ng` command also takes `--author USER`: who History "
                    "records as the author (default `$USER`).", ""])
    out.extend(body)
    return "\n".join(out) + "\n"


# --- tasks ----------------------------------------------------------------------------

def tasks_page() -> str:
    from cheeto_like.config import DaemonTasks
    from cheeto_like.daemon.config import HUB_QUEUE, TASKS

    out = ["# Daemon task reference", "", GENERATED_NOTE,
           "Every task the daemon runs (`daemon/config.py` TASKS). A task is enabled by "
           "its block under `daemon.<profile>.tasks`; an absent block, `null` or "
           "`enabled: false` disables it. `cheeto daemon enqueue NAME` runs one now. "
           f"Per-site tasks on the site queue run on `slurm.<site>` (the site's head-node "
           f"worker); the rest on `{HUB_QUEUE}` (the hub).", "",
           "| task | Celery name | config block | per site | queue | needs sections |",
           "|---|---|---|---|---|---|"]
    skeleton = skeleton_comments()
    for spec in TASKS.values():
        queue = "`slurm.<site>`" if spec.on_site_queue else f"`{HUB_QUEUE}`"
        needs = ", ".join(f"`{n}`" for n in spec.needs) or "-"
        out.append(f"| `{spec.name}` | `{spec.celery_name}` "
                   f"| `daemon.<profile>.tasks.{spec.block}` "
                   f"| {'yes' if spec.per_site else 'no'} | {queue} | {needs} |")
    out.append("")
    for spec in TASKS.values():
        field = DaemonTasks.model_fields[spec.block]
        out.extend([f"## `{spec.name}`", ""])
        for _, model in _models_in(field.annotation):
            doc = _doc(model)
            if doc:
                out.extend([doc, ""])
            out.extend([f"Block `daemon.<profile>.tasks.{spec.block}`:", "",
                        "| key | type | default | meaning |", "|---|---|---|---|"])
            comments = _comments(model)
            for name, f in model.model_fields.items():
                meaning = (f.description or comments.get(name) or skeleton.get(
                    f"daemon.<profile>.tasks.{spec.block}.{f.alias or name}", ""))
                out.append(f"| `{f.alias or name}` | {_code(_type_name(f.annotation))} | "
                           f"{_default(f)} | {_prose(meaning)} |")
            out.append("")
    return "\n".join(out) + "\n"


# --- api ------------------------------------------------------------------------------

def openapi() -> dict[str, Any]:
    from cheeto_like.config import ApiConfig, Config, MongoConfig
    from cheeto_like.web.app import create_api

    quiet = logging.getLogger("cheeto_like")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            config = Config(mongo=MongoConfig(), api=ApiConfig(
                api_key="reference-" * 4, jwt_key_file=Path(tmp) / "jwt.key"))
            return create_api(config).openapi()
    finally:
        quiet.setLevel(level)


def api_page() -> str:
    from cheeto_like.config import ApiConfig

    document = openapi()
    info = document.get("info", {})
    prefix = ApiConfig().prefix
    out = ["# REST API reference", "", GENERATED_NOTE,
           f"{info.get('title', 'cheeto')} {info.get('version', '')}: "
           f"from the API's OpenAPI document, which a running API serves at "
           f"`{prefix}/openapi.json`.", ""]
    if info.get("description"):
        out.extend([info["description"], ""])
    by_tag: dict[str, list[str]] = {}
    for path, methods in document.get("paths", {}).items():
        for method, operation in methods.items():
            if method.startswith("x-") or not isinstance(operation, dict):
                continue
            tag = (operation.get("tags") or ["other"])[0]
            auth = "yes" if operation.get("security") else "no"
            by_tag.setdefault(tag, []).append(
                f"| `{method.upper()}` | `{path}` | {_prose(operation.get('summary', ''))}"
                f" | {_parameters(operation)} | {auth} |")
    for tag in sorted(by_tag):
        out.extend([f"## {tag}", "", "| method | path | summary | parameters | credential |",
                    "|---|---|---|---|---|", *by_tag[tag], ""])
    out.extend(["Parameters: `name?` is optional; `body` is the JSON request body's schema.",
                ""])
    return "\n".join(out) + "\n"


def _parameters(operation: dict[str, Any]) -> str:
    """The query and header parameters (path ones are in the path) and the body's schema."""
    names = []
    for parameter in operation.get("parameters", []):
        if parameter.get("in") in ("query", "header"):
            mark = "" if parameter.get("required") else "?"
            names.append(f"`{parameter['name']}{mark}`")
    body = operation.get("requestBody", {}).get("content", {})
    for content in body.values():
        ref = content.get("schema", {}).get("$ref", "")
        names.append(f"body `{ref.rsplit('/', 1)[-1] or 'object'}`")
        break
    return ", ".join(names) or "-"


def api_paths() -> list[tuple[str, str]]:
    return [(method.upper(), path) for path, methods in openapi().get("paths", {}).items()
            for method in methods if not method.startswith("x-")]


def pages() -> dict[str, str]:
    return {"reference/config.md": config_page(), "reference/cli.md": cli_page(),
            "reference/tasks.md": tasks_page(), "reference/api.md": api_page()}


if __name__ == "__main__":  # pragma: no cover - a convenience for reading the pages
    target = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    for name, text in pages().items():
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        (target / name).write_text(text)
        print(target / name)

"""Tripwire: user data never reaches rich as markup (issue 12).

``ctx.out.info/success/warn`` take markup we write; every value interpolated into such a
message must pass through ``esc()`` (rich escaping plus visible control characters). This
test reads the CLI's source and fails on any interpolation that does not, so a new
``f"created {volume.host}"`` cannot bring back the ``--host '[/]'`` crash.
"""

from __future__ import annotations

import ast
from pathlib import Path

import cheeto_like.cli

CLI_DIR = Path(cheeto_like.cli.__file__).parent
MESSAGE_METHODS = {"info", "success", "warn"}


def _is_out(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "out") or \
        (isinstance(node, ast.Name) and node.id == "out")


def _safe_value(node: ast.expr) -> bool:
    """``esc(…)``, ``len(…)``, a ``*_markup(…)`` helper (builds escaped markup itself) or
    a non-string constant."""
    if isinstance(node, ast.Constant):
        return not isinstance(node.value, str) or "[" not in node.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id in ("esc", "len") or node.func.id.endswith("_markup")
    return False


def _numeric_spec(value: ast.FormattedValue) -> bool:
    """``{n:+g}``, ``{n:.1f}``, ``{n:d}``: a numeric format fails on text, so it is safe."""
    spec = value.format_spec
    return (value.conversion == -1 and isinstance(spec, ast.JoinedStr)
            and all(isinstance(p, ast.Constant) for p in spec.values)
            and "".join(str(p.value) for p in spec.values)[-1:] in tuple("bdeEfFgGnoxX%"))


def _problems(message: ast.expr) -> list[ast.expr]:
    if isinstance(message, ast.Constant):
        return []
    if isinstance(message, ast.JoinedStr):
        return [v.value for v in message.values
                if isinstance(v, ast.FormattedValue) and not _numeric_spec(v)
                and (v.conversion != -1 or v.format_spec is not None
                     or not _safe_value(v.value))]
    if isinstance(message, ast.BinOp) and isinstance(message.op, ast.Add):
        return _problems(message.left) + _problems(message.right)
    if isinstance(message, ast.IfExp):
        return _problems(message.body) + _problems(message.orelse)
    return [] if _safe_value(message) else [message]


def test_every_interpolated_value_is_escaped():
    found: list[str] = []
    checked = 0
    for path in sorted(CLI_DIR.rglob("*.py")):
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in MESSAGE_METHODS and _is_out(node.func.value)
                    and node.args):
                continue
            checked += 1
            for bad in _problems(node.args[0]):
                found.append(f"{path.relative_to(CLI_DIR)}:{bad.lineno}: "
                             f"{ast.get_source_segment(source, bad)}")
    assert checked > 80
    assert not found, "wrap these in esc():\n" + "\n".join(found)


def test_the_tripwire_catches_an_unescaped_value():
    source = 'ctx.out.success(f"created {volume.host} [bold]{esc(name)}[/] {n:+g} {m:>5} {k!r}")'
    call = ast.parse(source).body[0]
    assert isinstance(call, ast.Expr) and isinstance(call.value, ast.Call)
    assert [ast.unparse(p) for p in _problems(call.value.args[0])] == ["volume.host", "m", "k"]

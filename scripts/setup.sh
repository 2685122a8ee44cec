#!/usr/bin/env bash
# Set up the development environment from a clean checkout:
#   1. find a Python 3.12 or 3.13 (the default python3 may be older);
#   2. bootstrap Poetry 2 into .tools/poetry when no usable poetry is on PATH;
#   3. install the project and its dev group into .venv from poetry.lock.
# Idempotent: a second run only checks that everything is in place.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

say() { printf '[setup] %s\n' "$*" >&2; }

supported() {  # $1: interpreter; true when it is CPython 3.12 or 3.13
  "$1" -c 'import sys; sys.exit(0 if (3, 12) <= sys.version_info[:2] < (3, 14) else 1)' 2>/dev/null
}

find_python() {
  local c
  if [ -n "${CHEETO_PYTHON:-}" ]; then
    supported "$CHEETO_PYTHON" && { echo "$CHEETO_PYTHON"; return; }
    say "CHEETO_PYTHON=$CHEETO_PYTHON is not Python 3.12 or 3.13"; exit 2
  fi
  for c in python3.13 python3.12 \
           "$HOME"/.pyenv/versions/3.13*/bin/python3 "$HOME"/.pyenv/versions/3.12*/bin/python3 \
           /usr/local/bin/python3.13 /usr/local/bin/python3.12 /usr/bin/python3.13 /usr/bin/python3.12 \
           python3; do
    if command -v "$c" >/dev/null 2>&1 && supported "$(command -v "$c")"; then
      command -v "$c"; return
    fi
  done
  say "no Python 3.12 or 3.13 found; install one or set CHEETO_PYTHON=/path/to/python3.12"
  exit 2
}

PY=$(find_python)
# pyenv shims resolve through the shell's pyenv version; ask the interpreter for its real path.
PY=$("$PY" -c 'import sys; print(sys.executable)')
say "python: $PY ($("$PY" -V 2>&1))"

poetry_ok() { "$1" --version 2>/dev/null | grep -Eq 'version 2\.'; }
POETRY=""
if command -v poetry >/dev/null 2>&1 && poetry_ok poetry; then
  POETRY=$(command -v poetry)
elif [ -x .tools/poetry/bin/poetry ] && poetry_ok .tools/poetry/bin/poetry; then
  POETRY=$ROOT/.tools/poetry/bin/poetry
else
  say "bootstrapping Poetry 2 into .tools/poetry"
  rm -rf .tools/poetry
  "$PY" -m venv .tools/poetry
  .tools/poetry/bin/pip install -q "poetry>=2,<3"
  POETRY=$ROOT/.tools/poetry/bin/poetry
fi
say "poetry: $("$POETRY" --version)"

export POETRY_VIRTUALENVS_IN_PROJECT=true
export POETRY_VIRTUALENVS_CREATE=true
export POETRY_NO_INTERACTION=1
# A .venv built by another interpreter (or a broken one) is rebuilt.
if [ -x .venv/bin/python ] && ! supported .venv/bin/python; then
  say "removing .venv built with an unsupported Python"; rm -rf .venv
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
"$POETRY" env use -q "$ROOT/.venv/bin/python" >/dev/null
"$POETRY" sync --no-interaction -q
# Byte-compile the environment once: with PYTHONDONTWRITEBYTECODE set (as on some CI
# machines) every CLI call would otherwise recompile beanie, pymongo and pydantic (~0.7 s).
.venv/bin/python -m compileall -q -j 0 .venv/lib >/dev/null 2>&1 || true
# The project's own modules too (an editable install is not compiled by pip): a command
# imports ~150 of them. After editing the code, rerun this script (or the line below) on
# such machines; stale .pyc files are simply recompiled in memory, never run.
.venv/bin/python -m compileall -q -j 0 cheeto_like >/dev/null 2>&1 || true
say "ready: .venv/bin/cheeto"

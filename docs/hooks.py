"""MkDocs hooks (``hooks:`` in mkdocs.yml): add the generated reference pages to every
build (``docs/gen_reference.py``), so they are never stale and never in ``docs/``."""

from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.structure.files import File, Files

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gen_reference


def on_files(files: Files, config, **kwargs) -> Files:  # type: ignore[no-untyped-def]
    for path, text in gen_reference.pages().items():
        existing = files.get_file_from_path(path)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, path, content=text))
    return files

"""The docs site (mkdocs.yml, docs/): it builds strictly and offline, its runnable blocks
run, its generated reference names everything, and no link leaves the repository.

A runnable block is fenced ```` ```bash run ````: its commands are run top to bottom, as
README.md's tour is (``tests/test_readme_tour.py``: the same extraction, a fresh HOME, the
module's test store, ``# needs: <service>`` skips a line). Every block of one page runs in
one test, in order, on an empty store; pages do not share state.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cheeto_like.cli import registry
from tests.test_readme_tour import needs, tour_commands
from tests.test_readme_tour import tour_env as tour_env  # the fixture, by name

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RUN_FENCE = "```bash run"
BIN = Path(sys.executable).parent


def gen_reference():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_reference", DOCS / "gen_reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def doc_pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def run_blocks(text: str) -> list[str]:
    """The commands of every ```` ```bash run ```` block, in order (continuations joined,
    comment-only lines dropped), with the tour's own extraction."""
    commands: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == RUN_FENCE:
            body = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith("```"):
                body.append(lines[i])
                i += 1
            assert i < len(lines), "a ```bash run block is not closed"
            commands += tour_commands("```bash tour\n" + "\n".join(body) + "\n```\n")
        i += 1
    return commands


RUNNABLE = [page for page in doc_pages() if run_blocks(page.read_text())]


def test_run_block_extraction() -> None:
    text = ("x\n```bash run\n# c\na \\\n  b\n```\n```bash\nnot run\n```\n"
            "```bash run\nc  # needs: slurm\n```\n")
    assert run_blocks(text) == ["a    b", "c  # needs: slurm"]


@pytest.mark.parametrize("page", RUNNABLE, ids=lambda p: str(p.relative_to(DOCS)))
async def test_runnable_blocks_run(page: Path, empty_db, tour_env: dict[str, str],
                                   tmp_path: Path) -> None:
    """Every command of a page's ```` ```bash run ```` blocks succeeds, in order."""
    work = tmp_path / "work"
    work.mkdir()
    known = {"slurm", "ldap", "hippo", "iam", "puppet-repo"}
    for command in run_blocks(page.read_text()):
        assert set(needs(command)) <= known, command
        if needs(command):
            continue
        result = await asyncio.to_thread(
            subprocess.run, ["bash", "-euo", "pipefail", "-c", command], cwd=work,
            env=tour_env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, (
            f"{page.relative_to(ROOT)}: command failed (exit {result.returncode}):\n"
            f"  {command}\nstdout: {result.stdout[-2000:]}\nstderr: {result.stderr[-2000:]}")


def test_mkdocs_builds_strictly_offline(tmp_path: Path) -> None:
    """``mkdocs build --strict`` succeeds (every nav page exists, no broken link or
    anchor), with the generated reference, and the site asks no outside host for fonts."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("CHEETO_")}
    env.update(NO_MKDOCS_2_WARNING="1", HOME=str(tmp_path / "home"))
    site = tmp_path / "site"
    # without a network where a user namespace may be made: the build must not need one
    isolate = ["unshare", "-rn"] if shutil.which("unshare") and subprocess.run(
        ["unshare", "-rn", "true"], capture_output=True).returncode == 0 else []
    result = subprocess.run(
        [*isolate, str(BIN / "mkdocs"), "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
        env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for page in ("reference/config", "reference/cli", "reference/tasks", "reference/api"):
        assert (site / page / "index.html").is_file(), page
    assert (site / "search" / "search_index.json").is_file()
    for html in site.rglob("*.html"):
        text = html.read_text()
        assert "fonts.googleapis.com" not in text and "fonts.gstatic.com" not in text, html


def nav_pages(nav: object) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    return []


def test_every_page_is_in_the_nav() -> None:
    """A page outside the nav is built but found by no one (strict mode only warns for
    the reverse)."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    listed = set(nav_pages(config["nav"]))
    pages = {str(page.relative_to(DOCS)) for page in doc_pages()}
    assert pages - listed == set()
    assert {f"reference/{name}.md" for name in ("config", "cli", "tasks", "api")} <= listed
    assert config["theme"]["font"] is False
    assert "search" in config["plugins"]


def test_reference_names_every_command_section_task_and_path() -> None:
    from cheeto_like.daemon.config import TASKS

    gen = gen_reference()
    pages = gen.pages()
    assert set(pages) == {"reference/config.md", "reference/cli.md", "reference/tasks.md",
                          "reference/api.md"}
    for node in registry.NODES:
        assert f"`cheeto {node.path}`" in pages["reference/cli.md"], node.path
    assert "--config" in pages["reference/cli.md"]
    for section in gen.config_sections():
        assert re.search(rf"^## `{section}(\.<profile>)?`$", pages["reference/config.md"],
                         re.MULTILINE), section
    for name, spec in TASKS.items():
        assert f"## `{name}`" in pages["reference/tasks.md"], name
        assert f"daemon.<profile>.tasks.{spec.block}" in pages["reference/tasks.md"]
    paths = gen.api_paths()
    assert len(paths) > 20
    for method, path in paths:
        assert f"| `{method}` | `{path}` |" in pages["reference/api.md"], (method, path)


KEY_TABLE = "| key | type | default | meaning |"


def empty_meanings(page: str) -> list[str]:
    """`<block> <key>` of every row of a key table whose meaning cell is empty (or only
    the 'see `...`' link to a nested block). The meaning is the last cell: a prose cell
    escapes its pipes, while a type or default code span may hold bare ones."""
    empty: list[str] = []
    where, in_table = "", False
    for line in page.splitlines():
        if line.startswith("#") or line.startswith("Block `"):
            where = line.strip("#: ")
        if line == KEY_TABLE:
            in_table = True
            continue
        if not line.startswith("|"):
            in_table = False
            continue
        if not in_table or line.startswith("|---"):
            continue
        cells = re.split(r"(?<!\\)\|", line.strip()[1:-1])
        meaning = re.sub(r"(^|\s)see `[^`]*`(, `[^`]*`)*$", "", cells[-1].strip()).strip()
        if not meaning:
            empty.append(f"{where} {cells[0].strip()}")
    return empty


def test_empty_meanings_are_found() -> None:
    page = "\n".join([
        "## `x`", "", KEY_TABLE, "|---|---|---|---|",
        "| `a` | `'u' | 't'` | `'u'` | where it listens \\| or not |",
        "| `b` | `int` | `1` |  |",
        "| `c` | `Y` | (the block's defaults) | see `x.c` |",
        "| `d` | `Y` | (the block's defaults) | the d block see `x.d` |", ""])
    assert empty_meanings(page) == ["`x` `b`", "`x` `c`"]


def test_every_config_and_task_key_has_a_meaning() -> None:
    """Each key's meaning comes from its Field(description=...), the comment on or above
    its line in cheeto_like/config/, or the skeleton's comment after it."""
    pages = gen_reference().pages()
    for name in ("reference/config.md", "reference/tasks.md"):
        assert KEY_TABLE in pages[name], name
        assert empty_meanings(pages[name]) == [], name


def test_generated_pages_are_not_committed() -> None:
    """The hook adds them at build time; a copy in docs/ would go stale."""
    assert not (DOCS / "reference").exists() or not any((DOCS / "reference").glob("*.md"))


GENERATED = {DOCS / "reference" / f"{name}.md" for name in ("config", "cli", "tasks", "api")}
FENCED = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)"
                  r"|(?:href|src)=[\"']([^\"']+)[\"']"
                  r"|^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)


def links(text: str) -> list[str]:
    text = INLINE.sub("", FENCED.sub("", text))
    return [next(g for g in match.groups() if g) for match in LINK.finditer(text)]


def test_link_extraction() -> None:
    text = ('[a](x.md#y) [b](https://e.org) <img src="img/d.png">\n[r]: ../up.md\n'
            "```\n[c](skip.md)\n```\n`[d](skip2.md)`")
    assert links(text) == ["x.md#y", "https://e.org", "img/d.png", "../up.md"]


@pytest.mark.parametrize("page", [ROOT / "README.md", *doc_pages()],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_links_stay_in_the_repository(page: Path) -> None:
    """A link is an http(s) URL, a mailto:, an anchor, a file in the repository or a
    generated reference page."""
    for target in links(page.read_text()):
        if re.match(r"(https?://|mailto:|#)", target):
            continue
        assert "://" not in target, f"{page.name}: {target}"
        path = (page.parent / target.split("#")[0].split("?")[0]).resolve()
        assert path.is_relative_to(ROOT), f"{page.relative_to(ROOT)}: {target} leaves the repo"
        assert path.exists() or path in GENERATED, (
            f"{page.relative_to(ROOT)}: {target} does not exist")

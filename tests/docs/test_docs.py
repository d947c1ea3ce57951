"""Every code example of README.md and docs/ is run (Python) or checked (shell), so the docs cannot rot.

How each block is run is said by a marker above it (``tests/docs/blocks.py``). Pages not yet marked by
their authors are listed in ``UNMARKED``: their unmarked Python blocks are reported as skipped.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest
from django.core.management import find_commands, get_commands

from .blocks import ROOT, Block, MarkerError, blocks, markdown_files
from .runner import HAS_DJANGO_TASKS, FileRun

# Pages whose Python blocks are signature listings and that their authors have not marked yet: each unmarked
# block there is skipped with this reason. Remove a page from here once its blocks carry markers.
UNMARKED: dict[str, str] = {}
# Pages that other issues are writing: links to them are allowed before they land.
PENDING_PAGES: set[str] = set()
EXAMPLE_COMMANDS = set(find_commands(str(ROOT / "example_project" / "example_app" / "management")))
PYTHON = {"python", "py", "pycon"}
SHELL = {"bash", "sh", "shell", "console"}
LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")

FILES = markdown_files()


def label(path: Path) -> str:
    return str(path.relative_to(ROOT))


# No test transaction around the blocks: they are code as a project runs it (a view, a shell), where a
# .delay() is stored at once, not at the commit of a transaction that never ends (ENQUEUE_ON_COMMIT).
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", FILES, ids=label)
def test_the_python_examples_run(path: Path, tmp_path: Path) -> None:
    try:
        found = [block for block in blocks(path) if block.lang in PYTHON]
    except MarkerError as exc:
        pytest.fail(str(exc))
    skipped: list[str] = []
    with contextlib.ExitStack() as stack:
        run = FileRun(tmp_path, stack)
        for block in found:
            reason = why_skip(block)
            if reason is not None:
                skipped.append(f"{block.where} ({reason})")
                continue
            run.run(block)
    if found and len(skipped) == len(found) and label(path) in UNMARKED:
        pytest.skip(f"not run: {'; '.join(skipped)}")


def why_skip(block: Block) -> str | None:
    if "skip" in block.options:
        return block.options["skip"]
    if "django6" in block.options and not HAS_DJANGO_TASKS:
        return "needs django.tasks (Django >= 6.0)"
    if not block.options and label(block.path) in UNMARKED:
        return UNMARKED[label(block.path)]
    return None


@pytest.mark.parametrize("path", FILES, ids=label)
def test_the_shell_examples_name_real_commands(path: Path) -> None:
    known = set(get_commands()) | EXAMPLE_COMMANDS
    for block in blocks(path):
        if block.lang not in SHELL:
            continue
        for command in re.findall(r"manage\.py\s+([a-z_]+)", block.code):
            assert command in known, f"{block.where}: `manage.py {command}` is no management command"
        for module in re.findall(r"python -m ([\w.]+)", block.code):
            assert module_exists(module), f"{block.where}: `python -m {module}`: no such module"


def module_exists(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


@pytest.mark.parametrize("path", FILES, ids=label)
def test_the_links_between_pages_lead_somewhere(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)  # not in code
    for match in LINK.finditer(text):
        target = match["target"].split("#", 1)[0]
        if not target or re.match(r"^[a-z]+:", target):
            continue  # an anchor on this page, or a URL
        resolved = (path.parent / target).resolve()
        if resolved.is_relative_to(ROOT) and label(resolved) in PENDING_PAGES:
            continue
        assert resolved.exists(), f"{label(path)}: the link {match['target']!r} leads nowhere"


def test_every_howto_page_is_linked_from_the_readme_or_the_quickstart() -> None:
    linked = (ROOT / "README.md").read_text(encoding="utf-8") + (ROOT / "docs" / "quickstart.md").read_text(
        encoding="utf-8"
    )
    for page in sorted((ROOT / "docs" / "howto").glob("*.md")):
        assert f"howto/{page.name}" in linked, f"docs/howto/{page.name} is linked from nowhere"

"""The shape every page keeps: a how-to opens with lines a reader can act on, and nothing cites a file that is
not in the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .blocks import ROOT

HOWTOS = sorted((ROOT / "docs" / "howto").glob("*.md"))
# Notes the project's authors keep outside the repository: a reader of the docs or the code cannot open them.
OUTSIDE = re.compile(
    r"\b(DESIGN|LMDB|STORE|STYLE|STRUCTURE|POSTGRES|COORDINATION)\.md\b|\.\./shared/|\bRFC-|EQueue's RFC"
)


def label(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", HOWTOS, ids=label)
def test_a_howto_opens_with_an_in_short_box(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# ") and lines[1] == "", f"{label(path)}: a title, then a blank line"
    assert lines[2] == "> **In short**", f"{label(path)}: the box comes right after the title"
    box = lines[2 : lines.index("", 2)]
    assert all(line.startswith(">") for line in box), f"{label(path)}: the box is one blockquote"
    items = [line for line in box if line.startswith("> - ")]
    assert 3 <= len(items) <= 6, f"{label(path)}: {len(items)} lines in the box, 3 to 6 wanted"


def test_nothing_cites_a_file_outside_the_repository() -> None:
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "queue_max_django").rglob("*.py")]
    found = [
        f"{label(path)}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if OUTSIDE.search(line)
    ]
    assert not found, "cited but not in the repository:\n" + "\n".join(found)

"""Fenced code blocks of the Markdown docs, with the ``<!-- docs: ... -->`` marker written above each.

A marker is an HTML comment on the line just before the fence (invisible on GitHub); it says how the block is
tested (``tests/docs/test_docs.py`` runs them):

- no marker: the block runs as Python, after the file's earlier blocks, in one namespace per file;
- ``<!-- docs: file myapp/tasks.py -->``: the block *is* that module: it is written under a temporary
  folder on ``sys.path`` and imported (so its tasks register), and later blocks may import it;
- ``<!-- docs: settings -->``: a settings excerpt: run with ``BASE_DIR`` (a temporary folder) defined; its
  ``QUEUE_MAX`` and ``TASKS`` then apply to the rest of the file, and must pass the system checks;
- ``<!-- docs: worker -->``: runs while a worker thread runs what is queued (``run_queued``), so that
  ``result.wait()`` returns;
- ``<!-- docs: pytest -->``: defines test functions, which are then called with the fixtures they name
  (``settings``, ``tmp_path``);
- ``<!-- docs: django6 -->``: needs Django's Tasks framework (Django >= 6.0), skipped on Django 5.2;
- ``<!-- docs: skip: why -->``: not run (a fragment, a signature listing, output), for the reason given.

Options combine with commas: ``<!-- docs: file myapp/jobs.py, django6 -->``. A block whose first line starts
with ``>>>`` is a doctest session, checked against the output it shows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
MARKER = re.compile(r"^\s*<!--\s*docs:\s*(?P<options>.*?)\s*-->\s*$")
OPTIONS = ("file", "settings", "worker", "pytest", "django6", "skip")


class MarkerError(ValueError):
    """A ``<!-- docs: ... -->`` marker that does not parse."""


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def is_doctest(self) -> bool:
        return self.code.lstrip().startswith(">>>")


def parse_options(text: str, where: str) -> dict[str, str]:
    options: dict[str, str] = {}
    if text.startswith("skip"):
        reason = text[4:].lstrip(":").strip()
        if not reason:
            raise MarkerError(f"{where}: `docs: skip` needs a reason: `<!-- docs: skip: why -->`")
        return {"skip": reason}
    for part in filter(None, (item.strip() for item in text.split(","))):
        name, _, value = part.partition(" ")
        if name not in OPTIONS or name == "skip":
            raise MarkerError(f"{where}: unknown docs marker option {name!r} (known: {', '.join(OPTIONS)})")
        if (name == "file") != bool(value.strip()):
            raise MarkerError(
                f"{where}: `file` takes a path (`file myapp/tasks.py`); other options take none"
            )
        options[name] = value.strip()
    return options


def blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path``, in order, with its marker's options."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if not match:
            index += 1
            continue
        start, fence = index, match["fence"]
        end = start + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        previous = next((lines[i] for i in range(start - 1, -1, -1) if lines[i].strip()), "")
        marker = MARKER.match(previous)
        where = f"{path.relative_to(ROOT)}:{start + 1}"
        options = parse_options(marker["options"], where) if marker else {}
        code = "\n".join(line.removeprefix(match["indent"]) for line in lines[start + 1 : end]) + "\n"
        found.append(Block(path, start + 1, match["lang"].lower(), code, options))
        index = end + 1
    return found


def markdown_files() -> list[Path]:
    """README.md and every page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

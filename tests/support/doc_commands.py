"""The shell blocks of README.md and docs/, as the tests that run them read them: a block
is found by its page and the start of its first line, so a test runs what the page prints."""

from __future__ import annotations

import dataclasses
import pathlib
import re
import shlex

ROOT = pathlib.Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(?:sh|bash|shell)\n(.*?)^```", re.S | re.M)
ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


@dataclasses.dataclass(frozen=True)
class Block:
    page: str  # relative to the repository's root
    line: int  # of its first command
    text: str

    @property
    def first_line(self) -> str:
        return self.text.splitlines()[0]


def pages() -> list[str]:
    return ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]


def blocks(page: str) -> list[Block]:
    text = (ROOT / page).read_text()
    return [Block(page, text[: m.start()].count("\n") + 2, m.group(1)) for m in FENCE.finditer(text)]


def block(page: str, starts_with: str) -> Block:
    """The one block of `page` whose first line starts with `starts_with`."""
    found = [b for b in blocks(page) if b.first_line.startswith(starts_with)]
    if len(found) != 1:
        raise LookupError(f"{page}: {len(found)} shell blocks start with {starts_with!r}")
    return found[0]


def command(page: str, starts_with: str, **placeholders: str) -> tuple[dict[str, str], list[str]]:
    """A block of one command (continued lines joined), split as the shell would: its
    leading VAR=value assignments, and its arguments with each placeholder word (NAME)
    replaced by the value given for it."""
    words = shlex.split(block(page, starts_with).text.replace("\\\n", " "), comments=True)
    assignments = {}
    while words and ASSIGNMENT.match(words[0]):
        name, value = words.pop(0).split("=", 1)
        assignments[name] = value
    return assignments, [placeholders.get(word, word) for word in words]

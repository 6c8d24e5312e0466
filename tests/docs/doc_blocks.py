"""The shell commands of a documentation page: its fenced ```bash blocks, each keyed by the page, the heading above it
and its place under that heading, with backslash continuations joined and comments dropped."""

import re
from dataclasses import dataclass
from pathlib import Path

_FENCE = re.compile(r"^```(\w*)\s*$")
_HEADING = re.compile(r"^#+\s+(.*)$")
_COMMENT = re.compile(r"(^|\s)#\s.*$")  # a `#` after whitespace starts a comment in these blocks


@dataclass(frozen=True)
class DocBlock:
    page: str  # relative to the repository
    heading: str
    ordinal: int  # 0 for the first bash block under its heading
    line: int  # of the opening fence
    commands: tuple[str, ...]

    @property
    def key(self) -> tuple[str, str, int]:
        return self.page, self.heading, self.ordinal


def _commands(lines: list[str]) -> tuple[str, ...]:
    commands, current = [], ""
    for raw in lines:
        line = _COMMENT.sub("", raw).rstrip()
        if line.endswith("\\"):
            current += line[:-1].rstrip() + " "
            continue
        current += line.strip()
        if current.strip():
            commands.append(" ".join(current.split()))
        current = ""
    return tuple(commands)


def bash_blocks(root: Path, page: str) -> list[DocBlock]:
    """Every ```bash block of `root/page`, in order."""
    blocks, heading, ordinals = [], "", {}
    lines = (root / page).read_text().splitlines()
    i = 0
    while i < len(lines):
        if (match := _HEADING.match(lines[i])):
            heading = match.group(1).strip()
        elif (fence := _FENCE.match(lines[i])):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            if fence.group(1) == "bash":
                ordinal = ordinals.get(heading, 0)
                ordinals[heading] = ordinal + 1
                blocks.append(DocBlock(page, heading, ordinal, i + 1, _commands(lines[i + 1:end])))
            i = end
        i += 1
    return blocks

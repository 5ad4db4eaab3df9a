"""The shell examples of README and of the reference moved out of it into docs/ (:data:`PAGES`), read
from the pages themselves (the tests use them: nothing to keep in sync).

:func:`readme_commands` gives every command line of those pages' ``bash`` blocks, split like a shell would
(continuations joined, comments dropped, cut at the first pipe or redirection);
:func:`demo_paths` the workspace paths (``.memwork/...``) a command reads, which ``make demo`` must
have written.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: README and the reference pages split out of it: every example in them is checked the same way
PAGES = [
    README,
    *(
        ROOT / "docs" / f"{name}.md"
        for name in ("usage", "defrag", "backends", "migration", "rollout", "development")
    ),
]
WORKSPACE_PREFIX = ".memwork/"
_FENCE = re.compile(r"^\s*```\s*([A-Za-z0-9_+-]*)\s*$")
_SHELL_OPERATORS = {"|", "||", "&&", ";", ">", ">>", "<", "2>&1", "&"}


@dataclass(frozen=True)
class Example:
    line: int  #: the page's line of the command's first line
    text: str
    argv: list[str]  #: the command's words up to the first pipe or redirection
    page: str = "README.md"  #: relative to the checkout

    @property
    def where(self) -> str:
        """``docs/usage.md:12``: where a failure message points."""
        return f"{self.page}:{self.line}"

    @property
    def is_memwork(self) -> bool:
        return bool(self.argv) and self.argv[0] == "memwork"


def readme_commands(path: Path | None = None) -> list[Example]:
    """Every command of the ``bash`` blocks of ``path`` (default: every page of :data:`PAGES`), in order."""
    if path is None:
        return [example for page in PAGES for example in readme_commands(page)]
    page = path.resolve().relative_to(ROOT).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Example] = []
    in_bash = False
    pending: tuple[int, str] | None = None
    for number, line in enumerate(lines, start=1):
        fence = _FENCE.match(line)
        if fence:
            in_bash = not in_bash and fence.group(1).lower() == "bash"
            continue
        if not in_bash:
            continue
        start, text = pending if pending else (number, "")
        text = f"{text} {line.strip()}" if text else line.strip()
        if text.endswith("\\"):
            pending = (start, text[:-1].rstrip())
            continue
        pending = None
        words = shlex.split(text, comments=True)
        if words:
            cut = next((i for i, w in enumerate(words) if w in _SHELL_OPERATORS), len(words))
            found.append(Example(start, text, words[:cut], page))
    return found


def demo_paths(example: Example) -> list[str]:
    """The workspace paths an example names (``.memwork/demo/shadow/comparisons.jsonl``)."""
    return [word for word in example.argv if word.startswith(WORKSPACE_PREFIX)]

"""README's first screen is the first contact: what memwork is, the two set-up commands, a picture of a real
report, what the demo's verdicts mean and where to go next -- within 60 lines. The long reference lives in
docs/, and every link of README and of those pages leads to a file (and heading) that exists."""

from __future__ import annotations

import re
import struct
import unicodedata
from pathlib import Path

import pytest
from readme_examples import PAGES, README, ROOT, readme_commands

FIRST_SCREEN = 60
_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^\s*```")


def _first_screen() -> str:
    return "\n".join(README.read_text(encoding="utf-8").splitlines()[:FIRST_SCREEN])


def _prose(text: str) -> str:
    """``text`` without its fenced code blocks (a link-like string in code is no link)."""
    kept, fence = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fence = not fence
        elif not fence:
            kept.append(line)
    return "\n".join(kept)


def test_the_only_set_up_commands_are_make_demo_and_make_test():
    commands = [e.argv for e in readme_commands(README)]
    assert commands == [["make", "demo"], ["make", "test"]]
    first = _first_screen()
    assert "make demo" in first and "make test" in first


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def test_the_first_screen_shows_a_picture_of_a_report():
    images = [target for bang, _, target in _LINK.findall(_prose(_first_screen())) if bang]
    assert images, "README's first screen has no picture"
    for target in images:
        path = ROOT / target
        assert path.is_file(), target
        width, height = _png_size(path)
        # a screenshot of a page's first screen, readable at its size: not an icon, not a whole page
        assert 800 <= width <= 2600 and 400 <= height <= 2000, (target, width, height)


def test_the_first_screen_says_what_each_verdict_means_as_the_demo_does():
    from memwork.samples.demo import VERDICTS_MEANING

    first = _first_screen()
    printed = " ".join(VERDICTS_MEANING)
    verdicts = ("PASS", "GO", "FAIL", "NO-GO", "INCONCLUSIVE", "INFO")
    for verdict in verdicts:
        assert re.search(rf"^\| \*\*{verdict}\*\*|/ \*\*{verdict}\*\* \|", first, re.MULTILINE), verdict
        assert verdict in printed, f"the demo prints no meaning of {verdict}"  # the two say the same


def test_the_first_screen_leads_to_the_index_and_the_rollout_runbook():
    first = _prose(_first_screen())
    assert "`reports/index.html`" in first
    targets = [target for _, _, target in _LINK.findall(first)]
    assert "runbooks/pgvector_rollout.md" in targets
    assert any(t.startswith("docs/") for t in targets)


def test_the_long_reference_lives_in_docs():
    """README stays a first screen and a map: the reference moved to docs/ (a long README returns
    the moment a section is pasted back)."""
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 2 * FIRST_SCREEN, len(lines)
    linked = {target.split("#")[0] for _, _, target in _LINK.findall(_prose("\n".join(lines)))}
    for page in PAGES[1:]:
        assert page.relative_to(ROOT).as_posix() in linked, f"README does not lead to {page.name}"


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading).strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown page (a repeated heading gets ``-1``, ``-2``, ... as on GitHub)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in _prose(path.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        anchor = github_anchor(match.group(1))
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_resolves(page):
    broken = []
    for _, _, target in _LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z]+:", target):
            continue  # http(s):, mailto:: not a file of the checkout
        file_part, _, anchor = target.partition("#")
        path = (page.parent / file_part).resolve() if file_part else page
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no heading #{anchor} in {path.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}:\n" + "\n".join(broken)


def test_the_anchor_rule_is_githubs():
    assert github_anchor("memwork defrag find-duplicates") == "memwork-defrag-find-duplicates"
    assert github_anchor("Migrating from other backends: `memwork import`") == (
        "migrating-from-other-backends-memwork-import"
    )
    assert github_anchor("Reports (parameterized notebooks → HTML)") == (
        "reports-parameterized-notebooks--html"
    )

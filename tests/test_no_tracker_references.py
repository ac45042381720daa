"""No code, test or doc points at an issue tracker. The tracker is not in the repository:
a ticket number tells a reader where a rule came from, not why it holds, and the pointer
dies with the tracker. A comment says the reason itself (README, "Contributing")."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEXT = ("*.py", "*.md", "*.html", "*.txt", "*.toml", "*.cfg", "*.js", "*.css", "Makefile")
# A tracker's word followed by a number ("issue", "ticket", "bug", with or without "#"),
# and a bare "#" and number after a space or bracket, the way a tracker's number is
# written. Sort keys ("fund#EUR#0") and colours ("#111") have a letter, digit or quote
# before the "#", so they do not match.
TRACKER = re.compile(
    r"\b(?:issue|ticket|bug|defect|jira)s?[ -]?#?\d+\b|(?:^|[\s(\[])#\d+\b",
    re.IGNORECASE,
)


def tracked_text_files() -> list[Path]:
    names = subprocess.run(
        ["git", "ls-files", "--", *TEXT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [ROOT / name for name in names if (ROOT / name).is_file()]


def tracker_references(text: str) -> list[str]:
    return [match.group(0).strip() for match in TRACKER.finditer(text)]


def test_no_file_cites_a_tracker():
    files = tracked_text_files()
    assert len(files) > 100, "git ls-files found too few files to mean anything"
    found = []
    for path in files:
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if tracker_references(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "tracker references:\n" + "\n".join(found)


def test_the_pattern_finds_what_it_is_for():
    """The check can fail: tracker numbers match, sort keys and colours do not."""
    # Built here, so this file holds no tracker number of its own for the check to find.
    n = 41
    cited = (f"see issue {n}", f"Issues #{n} and 4", f"(#{n})", f"bug-{n}", f"fixes #{n}")
    for text in cited:
        assert tracker_references(text), text
    for innocent in ('ledger_key=f"{fund}#{currency}#0"', 'dark="#111"', "`#2`", "HTTP 429"):
        assert not tracker_references(innocent), innocent

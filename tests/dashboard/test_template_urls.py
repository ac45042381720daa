"""Templates name routes (``{% url %}``), never spell paths: the paths live in the URLconfs
alone (docs/design.md §11), so a link cannot drift from the route it means."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The layout's own folder and each app's.
TEMPLATE_DIRS = [ROOT / "templates", *sorted(ROOT.glob("dashboard/*/templates"))]
# A link, form or htmx request to a path of ours spelled out; static files excepted.
SPELLED_PATH = re.compile(r'(?:href|action|hx-get|hx-post|hx-put|hx-delete)="/(?!static/)')


def test_no_template_spells_a_path():
    """Every page template reaches the project's routes through {% url %}, by name."""
    spelled = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for folder in TEMPLATE_DIRS
        for path in sorted(folder.rglob("*.html"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if SPELLED_PATH.search(line)
    ]
    assert spelled == []

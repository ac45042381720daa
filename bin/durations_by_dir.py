"""Sum pytest's ``--durations=0`` report by test directory (docs/testing.md).

    python bin/durations_by_dir.py before.log after.log

Each log is the output of ``pytest --durations=0 …``; the table gives, per directory,
the seconds spent in set-up, call and tear-down, summed over tests (under xdist: over
workers, so the total is CPU-side test time, not wall time).
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

LINE = re.compile(r"^([\d.]+)s (setup|call|teardown)\s+(\S+?)::")


def by_directory(log: Path) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for line in log.read_text(errors="replace").splitlines():
        match = LINE.match(line)
        if match:
            totals[str(Path(match.group(3)).parent)] += float(match.group(1))
    return totals


def main(paths: list[str]) -> None:
    tables = [by_directory(Path(p)) for p in paths]
    directories = sorted(set().union(*tables))
    print("| directory | " + " | ".join(Path(p).name for p in paths) + " |")
    print("|---|" + "---:|" * len(paths))
    for directory in directories:
        cells = " | ".join(f"{t.get(directory, 0.0):.0f} s" for t in tables)
        print(f"| `{directory}` | {cells} |")
    cells = " | ".join(f"**{sum(t.values()):.0f} s**" for t in tables)
    print(f"| total | {cells} |")


if __name__ == "__main__":
    main(sys.argv[1:])

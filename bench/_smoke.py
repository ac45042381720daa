"""``make bench-smoke``: every benchmark script once, at its smallest size, so a change
that breaks a bench (or one of the assertions it makes) is seen when it is made, not
months later when someone wants figures.

A script is a ``bench/*.py`` whose name does not start with ``_`` and that has a
``__main__`` block; the others without ``_`` (``audit_synthetic.py``, ``open_cases.py``)
are modules the scripts and the tests import. Every script found must have its tiny-run
flags in ``SMOKE_ARGS``: one without fails the run, so a new bench cannot be left out.
Nothing is written to the docs: no script gets ``--write``, and ``docs/`` is compared
before and after. Any script that exits non-zero (an assertion of its own included) or
runs past ``TIMEOUT_S`` fails the run; the rest still run, and the times are reported.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
DOCS = ROOT / "docs"
# A stopped bench, not a slow one: the acknowledgements bench starts some twenty
# processes even at its smallest size, 200 s on a slow 2-core machine.
TIMEOUT_S = 600

# Each script's own flags for a run of seconds (its default sizes take minutes to hours).
SMOKE_ARGS: dict[str, tuple[str, ...]] = {
    "acks.py": ("--pledges", "20", "--backlog", "40"),
    "acks_cost.py": ("--backlog", "40", "--profile"),
    "capacity.py": (),  # a fixed list of single pledges and case steps: no size to choose
    "export.py": ("--sizes", "300", "--rounds", "1", "--threads", "2"),
    "hot_fund.py": ("--smoke",),
    "http_intake.py": ("--smoke",),
    "index_alternatives.py": ("--alternatives", "0,1", "--sizes", "100,200", "--sample", "5"),
    "intake.py": ("--pledges", "10", "--rounds", "1", "--warmup", "10"),
    "pages.py": ("--sizes", "50", "--rounds", "1"),
    # Its "Load more" page needs two full pages in the measured queue (70 % of the cases).
    "queue_page.py": ("--sizes", "200,400", "--rounds", "2", "--warmup", "1"),
    "sweep.py": ("--sizes", "100,200", "--stuck", "2"),
}


def scripts() -> list[Path]:
    return sorted(
        path
        for path in BENCH.glob("*.py")
        if not path.name.startswith("_") and 'if __name__ == "__main__":' in path.read_text()
    )


def docs_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(DOCS.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def run(path: Path, logs: Path) -> tuple[bool, float, str]:
    """(passed, seconds, the output's tail when it failed)."""
    args = SMOKE_ARGS[path.name]
    assert "--write" not in args, f"{path.name}: the smoke run never writes the docs"
    log = logs / f"{path.stem}.log"
    started = time.monotonic()
    with open(log, "wb") as out:
        try:
            code = subprocess.run(
                [sys.executable, str(path), *args],
                cwd=ROOT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=TIMEOUT_S,
            ).returncode
        except subprocess.TimeoutExpired:
            code = None
    seconds = time.monotonic() - started
    if code == 0:
        return True, seconds, ""
    tail = log.read_text(errors="replace")[-3000:]
    why = f"ran past {TIMEOUT_S} s" if code is None else f"exit {code}"
    return False, seconds, f"{why}; last lines of {log}:\n{tail}"


def main() -> int:
    found = scripts()
    missing = [p.name for p in found if p.name not in SMOKE_ARGS]
    if missing:
        print(f"bench-smoke: no smoke flags for {', '.join(missing)}: add them to SMOKE_ARGS")
        return 1
    stale = sorted(set(SMOKE_ARGS) - {p.name for p in found})
    if stale:
        print(f"bench-smoke: SMOKE_ARGS names scripts that are gone: {', '.join(stale)}")
        return 1
    logs = Path(tempfile.mkdtemp(prefix="bench-smoke-"))
    before = docs_digest()
    failed = []
    started = time.monotonic()
    for path in found:
        print(f"bench-smoke: {path.name} {' '.join(SMOKE_ARGS[path.name])}", flush=True)
        passed, seconds, detail = run(path, logs)
        verdict = "ok" if passed else "FAILED"
        print(f"bench-smoke: {verdict} {path.name} {seconds:.0f} s", flush=True)
        if not passed:
            failed.append(path.name)
            print(detail, flush=True)
    total = time.monotonic() - started
    print(
        f"bench-smoke: {len(found) - len(failed)} of {len(found)} scripts passed in "
        f"{total:.0f} s (logs in {logs})" + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    if docs_digest() != before:
        print("bench-smoke: FAILED: a script changed docs/ (a smoke run writes nothing)")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

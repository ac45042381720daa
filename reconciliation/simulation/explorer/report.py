"""What an exploration prints: the matrix of call points by fault kinds, a line to replay
each violation, and faults that were planned but never fired.
"""

from __future__ import annotations

from reconciliation.simulation.explorer.session import Result
from reconciliation.simulation.explorer.vocabulary import COLUMNS, KINDS, WRITE_ONLY


def result_lines(results: list[Result]) -> list[str]:
    """The matrix, then a line to replay each violation, then a note on planned faults that
    never fired."""
    out = matrix_lines(results)
    for result in (r for r in results if r.problems):
        shown = "; ".join(str(p) for p in result.problems[:3])
        more = f" (+{len(result.problems) - 3} more)" if len(result.problems) > 3 else ""
        out.append(f"explore_faults --only '{result.scenario}'  ✗ {shown}{more}")
    unfired = [f for r in results for f in r.unfired]
    if unfired:
        out.append(f"note: {len(unfired)} planned faults never fired, e.g. {unfired[0]}")
    return out


def matrix_lines(results: list[Result]) -> list[str]:
    """Rows: the call point of each scenario's last fault; columns: fault kinds; a cell
    counts its scenarios: ``ok``, ``2✗`` (violations), ``-`` (not applicable)."""
    tally: dict[tuple[str, str], list[int]] = {}
    writes: dict[str, bool] = {}
    for result in results:
        for call in result.calls:
            writes.setdefault(call.point, call.write)
        if result.plan:
            last = result.plan[-1]
            cell = tally.setdefault((str(last.point), last.kind), [0, 0])
            cell[0] += 1
            cell[1] += bool(result.problems)
    rows = list(dict.fromkeys(point for point, _ in tally))
    width = max([len(r) for r in rows] + [10])
    legend = ", ".join(f"{short} {kind}" for kind, short in COLUMNS.items())
    out = [
        f"columns: {legend}",
        f"{'call point':<{width}} | " + " ".join(f"{c:>6}" for c in COLUMNS.values()),
    ]
    for row in rows:
        cells = [_cell(tally.get((row, kind)), writes.get(row, True), kind) for kind in KINDS]
        out.append(f"{row:<{width}} | " + " ".join(f"{c:>6}" for c in cells))
    baseline = next((r for r in results if not r.plan), None)
    if baseline is not None:
        verdict = "✗" if baseline.problems else "ok"
        out.append(f"fault-free life: {len(baseline.calls)} calls, {verdict}")
    return out


def _cell(tally: list[int] | None, write: bool, kind: str) -> str:
    if tally is None:
        return "." if write or kind not in WRITE_ONLY else "-"
    count, bad = tally
    if bad:
        return f"{bad}✗" if count == 1 else f"{bad}✗/{count}"
    return "ok" if count == 1 else f"ok×{count}"

"""The Markdown section bench/capacity.py writes: items and index entries in bytes, then
every write call per step, its units by the documented rules beside the engine's."""

from __future__ import annotations

from _capture import FAILED_CONDITION, Call

from reconciliation.dynamo.item_size import index_entry, item_size, write_units
from reconciliation.dynamo.tables import Table

KB = 1024


def render(steps: list[tuple[str, list[Call]]], tables: list[Table], names, machine: str) -> str:
    roles = ("idempotency_keys", "pledges", "ledger", "cases", "audit_events", "requests")
    short = {getattr(names, a): a for a in roles}
    by_label = dict(steps)
    lines = [
        "## Capacity per pledge (`bench/capacity.py`)",
        "",
        f"DynamoDB Local, the real service layer; {machine}. Bytes as DynamoDB counts them",
        "(`reconciliation/dynamo/item_size.py`, checked against the engine at 1,023 / 1,024 /",
        "1,025 bytes); WCU on demand, 1 per started KB, twice in a transaction. Index",
        "units are named by table and index (`pledges.by_day`, `audit_events.by_day`): until",
        "2026-12-04 the engine column kept one of two same-named indexes of one transaction.",
        "",
        "### Items and index entries",
        "",
        "| item | typical: bytes | WCU | largest: bytes | WCU | largest vs 1 KB |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    typical = _items(by_label["(a) typical pledge: new"], short)
    largest = _items(by_label["(b) largest pledge: new"], short)
    big_images = _images(by_label["(b) largest pledge: new"], short)
    over = []
    for (label, small), (_label, big) in zip(typical, largest, strict=True):
        verdict = f"**{big - KB:+d} B over**" if big > KB else f"{KB - big} B to spare"
        if big > KB:
            over.append(
                f"{label} ({big} bytes, {big - KB} over 1 KB: {_heaviest(big_images[label])})"
            )
        lines.append(
            f"| {label} | {small} | {write_units(small)} | {big} | {write_units(big)} | {verdict} |"
        )
    lines += [
        "",
        *_over_line(over),
        "",
        *_findings(steps),
        "",
        "### Case items (typical pledge)",
        "",
    ]
    lines += ["| item | bytes | WCU |", "| --- | ---: | ---: |"]
    for label, calls in steps:
        if label.startswith("case opened") and "second" not in label:
            for item_label, size in _items(calls, short, only="cases"):
                kind = label.split(": ")[1].split(" ")[0]
                lines.append(f"| {item_label} ({kind}) | {size} | {write_units(size)} |")
    lines += [
        "",
        "### Write units per call",
        "",
        "Computed: by the documented rules from the stored images before and after each",
        "call. Engine: DynamoDB Local's `ConsumedCapacity` (`INDEXES`). Source says which",
        "figure is which.",
        "",
        "| step | call | bytes billed | WCU computed | WCU engine | source |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    totals = []
    for label, calls in steps:
        computed_sum, engine_sum, read_engine, read_computed = 0, 0.0, 0.0, 0.0
        for call in calls:
            read_engine += call.read_reported
            read_computed += call.read_computed or 0.0
            if not call.writes:
                continue
            computed = call.computed()
            computed_sum += sum((computed or {}).values())
            engine_sum += sum((call.reported or {}).values())
            lines.append(
                f"| {label} | {_call_name(call, short)} | {_billed(call, short)} "
                f"| {_units(computed, short)} | {_units(call.reported, short)} "
                f"| {_source(call, computed)} |"
            )
        totals.append((label, computed_sum, engine_sum, read_engine, read_computed, calls))
    lines += [
        "",
        "### Per step",
        "",
        "| step | WCU computed | WCU engine | RCU engine | RCU computed (GetItem only) | calls |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for label, computed_sum, engine_sum, read_engine, read_computed, calls in totals:
        ops: dict[str, int] = {}
        for call in calls:
            ops[call.operation] = ops.get(call.operation, 0) + 1
        ops_text = ", ".join(f"{n}× {op}" for op, n in ops.items())
        lines.append(
            f"| {label} | {computed_sum} | {engine_sum:g} | {read_engine:g} "
            f"| {read_computed:g} | {ops_text} |"
        )
    return "\n".join(lines)


def _step_units(calls: list[Call]) -> tuple[int, float]:
    computed = sum(sum((c.computed() or {}).values()) for c in calls if c.writes)
    return computed, sum(sum((c.reported or {}).values()) for c in calls if c.writes)


def _findings(steps: list[tuple[str, list[Call]]]) -> list[str]:
    by_label = dict(steps)
    lines = ["Findings:", ""]
    for which in ("(a) typical", "(b) largest"):
        new = _step_units(by_label[f"{which} pledge: new"])
        replay = _step_units(by_label[f"{which} pledge: replay"])
        lines.append(
            f"- {which} pledge: {new[0]} WCU by the rules, {new[1]:g} reported by the engine; "
            f"its replay {replay[0]} WCU (the claim PutItem whose condition fails, billed at "
            f"the stored claim's size), {replay[1]:g} reported."
        )
    for which, delivered in (
        ("(a) typical", "acknowledgement (a): shard lease held, delivered"),
        ("(b) largest", "acknowledgement (b) largest pledge: shard lease held, delivered"),
    ):
        if delivered not in by_label:
            continue
        entry = sum(
            units
            for c in by_label[f"{which} pledge: new"]
            if c.writes
            for key, units in (c.computed() or {}).items()
            if key.endswith("/acks_due")
        )
        sent = _step_units(by_label[delivered])[0]
        lines.append(
            f"- {which} pledge's acknowledgement: +{entry + sent} WCU: its commit's "
            f"`acks_due` entry {entry}, its delivery under a held shard lease {sent} (the "
            "shard lease, when taken or renewed, 1 more per shard and pass)."
        )
    for label, calls in steps:
        for call in calls:
            if not call.writes or call.reported is None:
                continue
            computed = sum((call.computed() or {}).values())
            reported = sum(call.reported.values())
            if computed > reported:
                lines.append(
                    f"- DynamoDB Local under-reports {label}: {computed} WCU by the rules, "
                    f"{reported:g} reported (items of equal units in one table counted once "
                    "per transaction)."
                )
    uncounted = sum(1 for _l, calls in steps for c in calls if c.writes and c.computed() is None)
    lines.append(
        f"- {uncounted} cancelled transaction(s) are not counted in either column: the engine "
        "reports nothing and the guide gives no per-item figure for a cancelled transaction."
    )
    return lines


def _over_line(over: list[str]) -> list[str]:
    if not over:
        return ["No item of the largest pledge exceeds 1 KB."]
    return ["Over 1 KB with the largest pledge: " + "; ".join(over) + "."]


def _image_label(target, short) -> str:
    image = target.after or target.before or {}
    status = image.get("status", {}).get("S")
    name = {
        "idempotency_keys": "claim",
        "pledges": "pledge",
        "ledger": "ledger shard",
        "requests": "request log entry",
    }.get(short[target.table.name], short[target.table.name])
    if short[target.table.name] == "audit_events":
        stream = image.get("stream", {}).get("S", "")
        name = (
            "audit receipt"
            if stream.startswith("PLEDGE#")
            else f"audit event ({stream.split('#')[0]})"
        )
    if short[target.table.name] == "cases":
        case_id = image.get("case_id", {}).get("S", "")
        state = image.get("state", {}).get("S", "")
        name = (
            "queue counter shard"
            if case_id.startswith("#COUNT#")
            else "acks_due shard lease"
            if case_id.startswith("#ACKLEASE#")
            else f"case {state}".strip()
        )
    return f"{name} ({status})" if status and name == "claim" else name


def _images(calls: list[Call], short) -> dict[str, dict]:
    """Each written item (and index entry) by its label in :func:`_items`."""
    found: dict[str, dict] = {}
    for call in calls:
        for target in call.targets if call.writes and not call.error else []:
            if target.after is not None:
                found[f"{_image_label(target, short)}, {call.operation}"] = target.after
                for index in target.table.indexes:
                    entry = index_entry(target.after, target.table, index)
                    kind = index.projection["ProjectionType"]
                    if entry is not None:
                        found[f"↳ {index.name} entry ({kind})"] = entry
    return found


def _heaviest(image: dict, count: int = 5) -> str:
    """The attributes that weigh most in ``image``, name and bytes (name included)."""
    sizes = sorted(((item_size({k: v}), k) for k, v in image.items()), reverse=True)
    return ", ".join(f"`{name}` {size}" for size, name in sizes[:count])


def _items(calls: list[Call], short, only: str | None = None) -> list[tuple[str, int]]:
    """Every item written (its image after the call) and its index entries, in bytes."""
    found = []
    for call in calls:
        if not call.writes or call.error:
            continue
        for target in call.targets:
            if only and short[target.table.name] != only or target.after is None:
                continue
            label = _image_label(target, short)
            found.append((f"{label}, {call.operation}", item_size(target.after)))
            for index in target.table.indexes:
                entry = index_entry(target.after, target.table, index)
                if entry is not None:
                    found.append(
                        (
                            f"↳ {index.name} entry ({index.projection['ProjectionType']})",
                            item_size(entry),
                        )
                    )
    return found


def _call_name(call: Call, short) -> str:
    tables = "+".join(short[t.table.name] for t in call.targets)
    error = f" → {call.error}" if call.error else ""
    return f"{call.operation} {tables}{error}"


def _billed(call: Call, short) -> str:
    sizes = []
    for t in call.targets:
        size = max(item_size(t.before or {}), item_size(t.after or {}))
        sizes.append(f"{short[t.table.name]} {size}")
    return ", ".join(sizes)


def _units(units: dict | None, short) -> str:
    if units is None:
        return "—"
    parts = [f"{_unit_name(k, short)} {v:g}" for k, v in units.items() if v]
    return " + ".join(parts) + f" = {sum(units.values()):g}" if parts else "0"


def _unit_name(key: str, short) -> str:
    """``pledges`` for a table's units, ``pledges.by_day`` for one of its indexes."""
    table, _, index = key.partition("/")
    return f"{short.get(table, table)}.{index}" if index else short.get(table, table)


def _source(call: Call, computed: dict | None) -> str:
    if call.error == FAILED_CONDITION:
        return "rules only: AWS bills the existing item (ALL_OLD); engines report nothing"
    if call.error == "TransactionCanceledException":
        codes = ", ".join(sorted(set(call.cancellation) - {"None"}))
        where = (
            "injected in place of DynamoDB" if "TransactionConflict" in codes else "by the engine"
        )
        return f"not counted: cancelled ({codes}) {where}; the engine reports nothing"
    if call.error == "IdempotentParameterMismatchException":
        return "not counted: refused by the engine (token reused), nothing written"
    if call.error:
        return f"rules only: {call.error}, no answer; the images show what applied"
    if computed is not None and call.reported is not None:
        reported = _nonzero(call.reported)
        if _nonzero(computed) == reported:
            return "engine = rules"
        if call.engine_model() is not None and _nonzero(call.engine_model()) == reported:
            return (
                "**engine < rules**: DynamoDB Local counts items of equal units in one "
                "table once per transaction; AWS bills each"
            )
        return "**engine ≠ rules**"
    return "rules only"


def _nonzero(units: dict) -> dict:
    return {k: int(v) for k, v in units.items() if v}

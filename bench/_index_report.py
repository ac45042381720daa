"""The ``index_alternatives`` section of docs/benchmarks.md, from the measured figures of
``bench/index_alternatives.py`` (the verdict lines name the measured numbers they rest on)."""

from __future__ import annotations

from _index_patches import SWEEP_ALTERNATIVES, TITLES

STUCK = 10  # stuck claims each step adds (bench/index_alternatives.py)


def _n(value: float) -> str:
    return f"{value:,.1f}".removesuffix(".0")


def _units(units: dict, op: str) -> str:
    table, index = units.get(f"{op}/table", 0.0), units.get(f"{op}/index", 0.0)
    return f"{_n(table)} + {_n(index)}"


def _total(units: dict) -> float:
    return sum(units.values())


def _index(units: dict) -> float:
    return sum(v for k, v in units.items() if k.endswith("/index"))


def _largest(result: dict) -> dict:
    return result["rows"][-1]


def judge(results: dict, key: str) -> dict:
    """Units saved per pledge against today, and whether the reads stay flat: the sweep
    examines only stuck claims (both instants, every size) and a day costs no more calls
    than today's and no more read units per event (10% slack)."""
    base, mine = results["0"], results[key]
    saved = _total(base["units"]) - _total(mine["units"])
    grown = _total(mine["units_after"]) - _total(mine["units"])
    # Every step adds STUCK stuck claims: the sweep now finds exactly those and opens their
    # cases, and after the completed horizon it finds nothing left.
    sweep_flat = all(
        row["now"]["examined"] == STUCK
        and row["now"]["cases"] == STUCK
        and row["later"]["examined"] == 0
        for row in mine["rows"]
        if "now" in row
    )
    base_day = {row["size"]: row["day"] for row in base["rows"]}
    day_flat = True
    for row in mine["rows"]:
        ref = base_day.get(row["size"])
        if ref is None:
            continue
        per_event = row["day"]["rcu"] / max(1, row["day"]["events"])
        ref_per_event = ref["rcu"] / max(1, ref["events"])
        day_flat &= row["day"]["calls"] <= ref["calls"] and per_event <= 1.1 * ref_per_event
        day_flat &= row["day"]["receipts"] == ref["receipts"] or key == "0"
    qualifies = key != "0" and saved > 0 and grown <= 0 and sweep_flat and day_flat
    return {
        "saved": saved,
        "grown": grown,
        "sweep_flat": sweep_flat,
        "day_flat": day_flat,
        "qualifies": qualifies,
    }


def _write_table(results: dict, verdicts: dict, sample: int) -> list[str]:
    lines = [
        "| alternative | claim PutItem (table + index) | commit (table + index) | other writes "
        "| total | of which index | saved vs today | total after the day's bulk |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for key, result in results.items():
        units, after = result["units"], result["units_after"]
        main = ("PutItem/", "TransactWriteItems/")
        other = sum(v for k, v in units.items() if not k.startswith(main))
        lines.append(
            f"| {key}: {TITLES[key]} | {_units(units, 'PutItem')} | "
            f"{_units(units, 'TransactWriteItems')} | {_n(other)} | {_n(_total(units))} | "
            f"{_n(_index(units))} | {_n(verdicts[key]['saved'])} | {_n(_total(after))} |"
        )
    lines += [
        "",
        f"Means over {sample} new pledges on fresh tables; the last column is the same "
        f"measure after {_largest(results['0'])['size']:,} (pending-index alternatives) or "
        "the day's bulk (by-day alternatives) more pledges.",
    ]
    return lines


def _sweep_table(results: dict) -> list[str]:
    lines = [
        "| alternative | completed pledges | sweep now: claims examined | RCU | calls | "
        "cases opened | after the completed horizon: examined | RCU | cases opened |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for key, result in results.items():
        if key not in SWEEP_ALTERNATIVES:
            continue
        for row in result["rows"]:
            now, later = row["now"], row["later"]
            lines.append(
                f"| {key} | {row['size']:,} | {now['examined']:,} | {_n(now['rcu'])} | "
                f"{now['calls']:,} | {now['cases']} | {later['examined']:,} | "
                f"{_n(later['rcu'])} | {later['cases']} |"
            )
    return lines


def _day_table(results: dict) -> list[str]:
    lines = [
        "| alternative | receipts that day | events read | calls | of which per-event reads "
        "(GetItem, BatchGetItem) | RCU | RCU per event |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for key, result in results.items():
        for row in result["rows"]:
            day = row["day"]
            lines.append(
                f"| {key} | {day['receipts']:,} | {day['events']:,} | {day['calls']} | "
                f"{day['per_event_calls']} | {_n(day['rcu'])} | "
                f"{day['rcu'] / max(1, day['events']):.3f} |"
            )
    return lines


def _explorer_lines(explored: dict, verdicts: dict) -> list[str]:
    if not explored:
        return ["No alternative qualified, and none was named with `--explore`."]
    lines = [
        "| alternative | why it ran | result | invariants broken (scenarios) |",
        "| --- | --- | --- | --- |",
    ]
    for key, run in explored.items():
        why = "qualifies" if verdicts[key]["qualifies"] else "named with `--explore`"
        why = "control: today's code" if key == "0" else why
        broken = ", ".join(f"{name} ({n})" for name, (n, _example) in run["broken"].items())
        lines.append(f"| {key} | {why} | `{run['summary']}` | {broken or '–'} |")
    examples = [
        f"- {key}, e.g. `{example}`"
        for key, run in explored.items()
        for _count, example in run["broken"].values()
    ]
    return [*lines, "", *examples] if examples else lines


def _figures(results: dict) -> dict:
    """The measured numbers the reasons below quote."""
    out = {"per": 0.0, "base": 0.0, "after": 0.0, "commit": 0.0, "alone": 0.0}
    base_day = _largest(results["0"])["day"]
    out["base"] = base_day["rcu"] / max(1, base_day["events"])
    if "2b" in results:
        first, big = results["2b"]["rows"][0]["now"], _largest(results["2b"])["now"]
        out["per"] = (big["rcu"] - first["rcu"]) / max(1, big["examined"] - first["examined"])
    if "3c" in results:
        out["after"] = _total(results["3c"]["units_after"])
    if "5" in results:
        units = results["5"]["units"]
        out["commit"] = units.get("TransactWriteItems/table", 0) + units.get(
            "TransactWriteItems/index", 0
        )
        out["alone"] = units.get("UpdateItem/table", 0) + units.get("UpdateItem/index", 0)
    return out


REASONS = {
    "1": "The commit still SETs `expires_at`, the index's range key, to the completed "
    "horizon, so the entry moves instead of leaving: an index delete and put (4 units in the "
    "transaction) instead of a delete (2). After the horizon every completed claim is a sweep "
    "candidate, re-read consistently by every sweep, until TTL purges it "
    "`CLAIM_PURGE_AFTER_S` later.",
    "2a": "The commit writes the `expires_at` the claim put already wrote, and the engine "
    "writes no index entry for an unchanged key: 2 units saved. But the index then holds the "
    "completed horizon, not the lease: a stuck claim is invisible to the sweep for "
    "`CLAIM_COMPLETED_TTL_S` (none of the 10 found now), the lease itself (409 while it "
    "runs, re-claim after) would need an attribute of its own, and after the horizon every "
    "completed claim is a candidate. The explorer passes it because its client waits out "
    "`Retry-After`, which is then the whole horizon, before its retry succeeds.",
    "2b": "2 units saved, but the entry stays, keyed by the lease, until TTL purges the claim "
    "(`purge_at`): every sweep (every `SWEEP_INTERVAL_S`) re-reads every completed claim of "
    "that span, {per:.2f} RCU each. A KEYS_ONLY entry cannot say COMPLETED, and projecting "
    "`status` would rewrite the entry at commit, the very write this saves. A sweep keeping "
    "a watermark and reading only the leases ended since its last run (not run here) would "
    "examine each completed claim once, about {per:.2f} RCU per pledge: its cost would follow "
    "the intake rate instead of the stuck claims, and a claim the eventually consistent index "
    "shows late would need an overlap to be caught.",
    "3a": "The entry moves from the receipt to the pledge, in the same transaction: nothing "
    "saved, and the reader fetches every receipt by key.",
    "3b": "The claim put writes the day entry outside the transaction (1 unit, not 2): 1 "
    "saved. The reader fetches every receipt by key (about 0.5 RCU an event, against "
    "{base:.3f} from `by_day`), meets the claims that never got a receipt, and loses a day's "
    "receipts once TTL purges its claims (`purge_at`): the trail would stop being readable "
    "by day after `CLAIM_COMPLETED_TTL_S` + `CLAIM_PURGE_AFTER_S`.",
    "3c": "2 saved on an empty day, but every pledge of a shard rewrites its whole per-day "
    "item: {after:.1f} units per pledge after the day's bulk, growing with the day up to the "
    "400 KB item limit, and one hot item per shard for all concurrent commits; the reader "
    "fetches every receipt by key.",
    "4": "A receipt is under 1 KB, so a KEYS_ONLY entry is billed the same unit (two in a "
    "transaction) as a full one: nothing saved. The export then fetches every event by key; "
    "so would the drift check (it projects `after`) and the period/checkpoint reader (it "
    "projects `hash`).",
    "5": "The commit costs {commit:.0f} units with the ConditionCheck and the completion "
    "UpdateItem {alone:.0f} more after it (claim and index entry, outside a transaction), "
    "one more round trip per new pledge, and the claim leaves the pending index alone, "
    "which docs/design.md §3 forbids. The completion must answer 201 whatever it meets: a first "
    "version that let its failure escape as a 503 broke the explorer's truthful-answer "
    "invariant in 5 scenarios (a definite failure after the pledge was recorded).",
}


CLOSEST = [
    "Alternatives 1, 2a, 2b and 5 leave `by_day` as it is (their day reads equal today's); "
    "3a–3c and 4 leave the pending index as it is (the sweep is today's). The other by-day "
    "readers were not run: the drift check projects `after` and the period/checkpoint "
    "reader `hash`, so under 3a–3c and 4 they would fetch every event by key as the export "
    "does. The 2-unit saving of 2a/2b rests on DynamoDB Local writing no index entry when "
    "neither the key nor a projected attribute changes.",
    "",
    "The closest candidate, should a sweep whose reads follow the intake rate be acceptable, "
    "is 2b with a watermark: in `ClaimRepository.finalise_expression`, for the commit's "
    "COMPLETED transition (`complete_item`), no `REMOVE pending_shard`, and the completed "
    "horizon written to a new `replay_until` instead of `expires_at` (`purge_at` counted "
    "from it, as now); `_judge_existing` reads `replay_until` for a COMPLETED claim (with "
    "`expires_at` it would fall back to reading the pledge once the lease is over, an extra "
    "round trip per replay); `ClaimRepository.pending_candidates` reads `expires_at "
    "BETWEEN watermark - overlap AND now - grace` from a stored watermark; and docs/design.md §3 "
    "(a claim leaves the index only in the commit or its case's transaction; the sweep's "
    "cost grows with stuck claims) changes. It trades 2 WCU per pledge for about one "
    "consistent claim read per pledge plus the overlap's re-reads.",
]


def _verdicts(results: dict, verdicts: dict, explored: dict) -> list[str]:
    base = results["0"]
    base_now = _largest(base)["now"]
    figures = _figures(results)
    out = []
    for key in results:
        if key == "0":
            continue
        v, big = verdicts[key], _largest(results[key])
        ran = f"; explorer: `{explored[key]['summary']}`" if key in explored else ""
        if key in SWEEP_ALTERNATIVES:
            now, later = big["now"], big["later"]
            reads = (
                f"sweep at {big['size']:,} completed: now {now['examined']:,} examined / "
                f"{_n(now['rcu'])} RCU / {now['cases']} of 10 stuck cases opened (today "
                f"{base_now['examined']} / {_n(base_now['rcu'])} / {base_now['cases']}); after "
                f"the completed horizon {later['examined']:,} examined / {_n(later['rcu'])} RCU"
            )
        else:
            day, ref = big["day"], next(r for r in base["rows"] if r["size"] == big["size"])["day"]
            reads = (
                f"a day of {day['receipts']:,} receipts: {day['calls']} calls "
                f"({day['per_event_calls']} per-event) / {_n(day['rcu'])} RCU (today "
                f"{ref['calls']} calls / {_n(ref['rcu'])} RCU)"
            )
        keep = "**Qualifies.**" if v["qualifies"] else "Reject."
        why = REASONS.get(key, "").format(**figures)
        saves = f"saves {_n(v['saved'])}" if v["saved"] >= 0 else f"adds {_n(-v['saved'])}"
        out.append(f"- **{key}** {saves} WCU per pledge; {reads}{ran}. {keep} {why}")
    return out


def render(figures: dict, sample: int, machine: str) -> str:
    results, verdicts = figures["results"], figures["verdicts"]
    explored = figures["explored"]
    qualifying = [k for k, v in verdicts.items() if v["qualifies"]]
    lines = [
        "## Index alternatives (`bench/index_alternatives.py`)",
        "",
        f"DynamoDB Local 3.3.1; {machine}. Units are what the engine reports "
        "(`ReturnConsumedCapacity=INDEXES`; DynamoDB Local counts every write of a "
        "transaction, index entries included, twice). Each alternative is a patch of the "
        "write path (`bench/_index_patches.py`, `unittest.mock.patch`) on tables of its own; "
        "production code is unchanged. Completed pledges were claimed 2 min before the "
        "sweep (their leases over); each step adds 10 claims stuck 10 min ago; “after the "
        "completed horizon” runs the sweep with the clock moved `CLAIM_COMPLETED_TTL_S` + 1 h "
        "ahead. A day is read as the export reads it (8 `by_day` shard Queries, `Limit=500`), "
        "plus what the alternative needs per event (eventually consistent BatchGetItem, 100 "
        "keys a request).",
        "",
        "### Write units per new pledge",
        "",
        *_write_table(results, verdicts, sample),
        "",
        "### Stuck-claim sweep",
        "",
        *_sweep_table(results),
        "",
        "### Reading one day back",
        "",
        *_day_table(results),
    ]
    if "export" in results["0"]:
        export = results["0"]["export"]
        calls = ", ".join(f"{n} {op}" for op, n in sorted(export["calls"].items()))
        lines += [
            "",
            f"Today's own CSV export of the largest day (`export_to_file`): {export['rows']:,} "
            f"rows, {_n(export['rcu'])} RCU, {calls} (its range reaches the next day's "
            "shards; the PutItem is its `EXPORT#` event).",
        ]
    lines += [
        "",
        "### Fault explorer (depth 1, in-process, patches applied)",
        "",
        *_explorer_lines(explored, verdicts),
        "",
        "### Verdicts (computed: saves units, sweep examines only the stuck claims and finds "
        "them now, a day costs no more calls and RCU per event than today)",
        "",
        *_verdicts(results, verdicts, explored),
        "",
        "Qualifying: " + (", ".join(qualifying) if qualifying else "none") + ".",
        "",
        *CLOSEST,
    ]
    return "\n".join(lines)

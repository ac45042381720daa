"""Open cases in every queue, written directly (``BatchWriteItem``) with the queue
counters that match them: how the benchmarks and the page-cost tests fill a cases table
cheaply. The items are what the write path stores (``case_to_item``), each case opened
at a spread of ages (minutes to two days) so every ageing bucket and SLA read has rows.
Synthetic, fictional records only."""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from decimal import Decimal

FUNDS = ("GENERAL", "BUILDING", "SCHOLARSHIP", "RELIEF")
# The state a case in each queue is in (the case types' queues are OPEN cases).
QUEUE_STATES = {"ESCALATED": "ESCALATED", "OVERRIDE_REQUESTED": "OVERRIDE_REQUESTED"}


def _iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def open_case_item(i: int, queue: str, now: datetime, *, tag: str = "") -> tuple[dict, dict]:
    """Case number ``i`` in ``queue``: its item, and its plain values for the counters."""
    from reconciliation.audit.repository import GENESIS_HASH
    from reconciliation.cases.models import (
        CaseRequest,
        ClientOutcome,
        OverrideRequest,
        Requester,
        case_id_for,
        case_to_item,
    )
    from reconciliation.cases.vocabulary import CaseState, CaseType, ErrorKind, Override, ReasonCode

    rng = random.Random(f"{tag}{i}")
    key = f"open-{tag}{queue}-{i:07d}"
    pk = f"acme#create_pledge#{key}"
    opened_at = _iso(now - timedelta(seconds=rng.randint(60, 48 * 3600)))
    case_type = queue if queue in CaseType.__members__ else "STUCK_PENDING"
    case_id = case_id_for(pk, 1, case_type, tag)
    amount = Decimal(rng.randint(500, 500_000)) / 100
    fund = FUNDS[i % len(FUNDS)]
    override = None
    if queue == "OVERRIDE_REQUESTED":
        # Shaped as override_request writes one (expiry in epoch seconds).
        override = OverrideRequest(
            request_id=f"bench-{tag}{i}",
            action=Override.RELEASE_CLAIM,
            requested_by=Requester(username="ada", email="ada@example.org", role="finance_staff"),
            reason_code=ReasonCode.CLIENT_CONFIRMED,
            reason_text="The client says the request never reached them.",
            requested_at=opened_at,
            pinned_version=1,
            expires_at=int((now + timedelta(hours=4)).timestamp()),
            prior_state=CaseState.OPEN,
        )
    from reconciliation.cases.models import Case

    case = Case(
        case_id=case_id,
        case_type=case_type,
        state=QUEUE_STATES.get(queue, "OPEN"),
        version=1,
        opened_at=opened_at,
        claim_pk=pk,
        claim_version=1,
        intent_id=f"acme#{key}",
        tenant="acme",
        fund=fund,
        amount=amount,
        currency="USD",
        request_token=f"{rng.getrandbits(128):032x}",
        token_issued_at=opened_at,
        audit_seq=1,
        audit_head=GENESIS_HASH,
        queue=queue,
        queue_sort=f"{opened_at}#{case_id}",
        override=override,
        client_outcome=ClientOutcome(error=ErrorKind.WORKER_DIED),
        last_actor="system",
        last_action_at=opened_at,
        request=CaseRequest(donor_ref=f"D-{i}", fund=fund, amount=str(amount), currency="USD"),
        in_totals=True,
        donor_ref=f"D-{i}",
    )
    return case_to_item(case), {"queue": queue, "amount": amount}


def open_cases_seed(
    client,
    table: str,
    per_queue: int,
    *,
    queues: Sequence[str] | None = None,
    tag: str = "",
    threads: int = 8,
) -> float:
    """Write ``per_queue`` open cases into each queue of ``queues`` (every queue by
    default) of the cases ``table`` and the counter items that count them (region
    ``tag``'s, shard 0); the seconds it took."""
    from reconciliation.cases.counters import counter_key
    from reconciliation.cases.vocabulary import QUEUES
    from reconciliation.dynamo.items import to_item

    chosen = list(queues or [str(q) for q in QUEUES])
    now = datetime.now(UTC)
    started = time.perf_counter()

    def write(items: list[dict]) -> None:
        request = {table: [{"PutRequest": {"Item": item}} for item in items]}
        delay = 0.05
        while request:
            request = client.batch_write_item(RequestItems=request).get("UnprocessedItems")
            if request:
                time.sleep(delay)  # DynamoDB's own backoff rule for unprocessed items
                delay = min(delay * 2, 1.0)

    numbered = [(n, q) for q in chosen for n in range(per_queue)]
    totals: dict[str, list] = {q: [0, Decimal(0)] for q in chosen}
    for n, queue in numbered:
        totals[queue][0] += 1
        totals[queue][1] += open_case_item(n, queue, now, tag=tag)[1]["amount"]

    def batch(lo: int) -> None:
        write(
            [
                open_case_item(n, q, now, tag=tag)[0]
                for n, q in numbered[lo : lo + 25]  # BatchWriteItem's most
            ]
        )

    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(batch, range(0, len(numbered), 25)))
    write(
        [
            to_item(
                {
                    "case_id": counter_key(q, 0, tag),
                    "open_count": count,
                    "totalled": count,
                    "amount_USD": amount,
                }
            )
            for q, (count, amount) in totals.items()
        ]
    )
    return time.perf_counter() - started

"""The claim fences under races (docs/design.md §4 "Fencing"): a re-claim takes the key from the
version it read, and a worker that lost its claim can neither attach a case to its
successor's claim nor complete it.

Barrier races run on DynamoDB Local only: moto's in-process backend is not thread-safe
(see test_engine_conformance.py: under a 16-thread race it has answered with 500s and let
two racers win one key), so a race on moto tests moto. The sequential fence tests run on
both engines.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from botocore.exceptions import ClientError

from reconciliation import clock
from reconciliation.claims import intake
from reconciliation.claims.models import (
    Claim,
    ClaimBody,
    ClaimKey,
    ClaimStatus,
    pending_shard,
)
from reconciliation.claims.outcomes import OutcomeKind
from reconciliation.claims.repository import ClaimTaken, Finalisation
from reconciliation.claims.request import parse_fields
from tests.conftest import pledge_body
from tests.helpers import Repos as Repositories
from tests.helpers import audit_events, ledger_total, pledges, race, repositories

TENANT = "acme"
RACERS = 16
ROUNDS = 10
LEASE_S = 60
FAILED_COOL_OFF_S = 30
STUCK_PENDING = "STUCK_PENDING"


class FrozenClock:
    """``clock.now`` pinned to one instant that only :meth:`advance` moves, so leases and
    expiries are exact to the second (a re-claimer's expiry can equal the stale one's)."""

    def __init__(self, at: datetime):
        self.at = at

    def now(self) -> datetime:
        return self.at

    def advance(self, seconds: int) -> None:
        self.at += timedelta(seconds=seconds)


@pytest.fixture
def frozen(monkeypatch) -> FrozenClock:
    fixed = FrozenClock(clock.now().replace(microsecond=0))
    monkeypatch.setattr(clock, "now", fixed.now)
    return fixed


def _attempt(repos: Repositories, key: str, n: int = 0) -> Claim:
    """A request's claim attempt for ``key`` (its own attempt id, token and lease)."""
    request = parse_fields(pledge_body())
    return repos.claims.new_claim(
        key=ClaimKey.of_pledge(TENANT, key),
        body=ClaimBody(request.payload_hash, request.normalised()),
        correlation_id=f"corr-{key}-{n}",
        client_address=f"10.0.0.{n + 1}",
        lease_s=LEASE_S,
    )


def _expired_pending(repos: Repositories, frozen: FrozenClock, key: str) -> Claim:
    """Worker A's PENDING claim (version 1), its lease now passed."""
    claim = repos.claims.create(_attempt(repos, key))
    frozen.advance(LEASE_S + 1)
    assert claim.expired()
    return claim


def _race(calls: list[Callable[[], Claim]]) -> tuple[dict[int, Claim], dict[int, ClaimTaken]]:
    """Start every call in its own thread at one barrier; return wins and refusals by index."""
    outcomes = race(*calls)
    wins = {n: o for n, o in enumerate(outcomes) if not isinstance(o, BaseException)}
    taken = {n: o for n, o in enumerate(outcomes) if isinstance(o, ClaimTaken)}
    # anything else raised is an engine or expression failure
    errors = [o for n, o in enumerate(outcomes) if n not in wins and n not in taken]
    assert errors == [], [str(e) for e in errors]
    assert len(wins) + len(taken) == len(calls)
    return wins, taken


def _assert_one_reclaimer_won(
    repos: Repositories, seen: Claim, attempts: list[Claim], wins: dict, taken: dict
) -> None:
    assert len(wins) == 1, f"winners: {sorted(wins)}"
    [(n, won)] = wins.items()
    winner = attempts[n]
    assert sorted(taken) == sorted(set(range(len(attempts))) - {n})
    for refused in taken.values():
        current = refused.current
        assert current is not None
        assert (current.attempt_id, current.request_token, current.version) == (
            winner.attempt_id,
            winner.request_token,
            seen.version + 1,
        )
    stored = repos.claims.get(seen.pk)
    assert stored == won
    assert (
        stored.status,
        stored.version,
        stored.attempt_id,
        stored.request_token,
        stored.expires_at,
        stored.pending_shard,
        stored.last_error_code,
    ) == (
        ClaimStatus.PENDING,
        seen.version + 1,
        winner.attempt_id,
        winner.request_token,
        winner.expires_at,
        pending_shard(seen.pk),
        None,
    )


@pytest.mark.dynamodb_local_only
@pytest.mark.parametrize("lease", ["fresh", "same_expiry"])
def test_racers_reclaiming_an_expired_pending_key_have_exactly_one_winner(ddb, frozen, lease):
    """16 threads at a barrier re-claim one expired PENDING key with their own attempts (10
    rounds; leases fresh, or built in the stale claim's second so they end when it did):
    exactly one wins, every other gets ClaimTaken naming the winner, and the stored claim is
    the winner's attempt at version seen+1."""
    repos = repositories()
    for round_no in range(ROUNDS):
        key = f"pend-{lease}-{round_no}"
        seen = repos.claims.create(_attempt(repos, key))
        if lease == "same_expiry":
            # Requests that arrived in the stale claim's own second and kept their attempt
            # through their retries: status and expiry cannot tell winner from stale.
            attempts = [_attempt(repos, key, n) for n in range(RACERS)]
            frozen.advance(LEASE_S + 1)
            assert {a.expires_at for a in attempts} == {seen.expires_at}
        else:
            frozen.advance(LEASE_S + 1)
            attempts = [_attempt(repos, key, n) for n in range(RACERS)]
        assert seen.expired()

        wins, taken = _race([lambda a=a: repos.claims.reclaim(seen, attempt=a) for a in attempts])
        _assert_one_reclaimer_won(repos, seen, attempts, wins, taken)


@pytest.mark.dynamodb_local_only
def test_racers_reclaiming_a_failed_key_have_exactly_one_winner(ddb, frozen):
    """16 threads at a barrier re-claim one FAILED key whose cool-off has passed (10 rounds):
    exactly one wins, every other gets ClaimTaken naming the winner, and the stored claim is
    the winner's attempt at version seen+1."""
    repos = repositories()
    for round_no in range(ROUNDS):
        key = f"failed-{round_no}"
        first = repos.claims.create(_attempt(repos, key))
        seen = repos.claims.finalise(
            first,
            Finalisation(
                status=ClaimStatus.FAILED, error_code="throttled", expires_in_s=FAILED_COOL_OFF_S
            ),
        )
        assert (seen.status, seen.version, seen.pending_shard) == (ClaimStatus.FAILED, 2, None)
        frozen.advance(FAILED_COOL_OFF_S + 1)
        assert seen.expired()
        attempts = [_attempt(repos, key, n) for n in range(RACERS)]

        wins, taken = _race([lambda a=a: repos.claims.reclaim(seen, attempt=a) for a in attempts])
        _assert_one_reclaimer_won(repos, seen, attempts, wins, taken)


def test_stale_reclaim_is_refused_after_the_key_went_round_to_the_same_failed_state(ddb, frozen):
    """A re-claimer holding a stale FAILED claim is refused once a successor has re-claimed
    the key and failed again within the same second, so that status and expiry match what
    the stale re-claimer read and only the version tells them apart."""
    repos = repositories()
    key = "aba-1"
    first = repos.claims.create(_attempt(repos, key))
    seen = repos.claims.finalise(
        first,
        Finalisation(
            status=ClaimStatus.FAILED, error_code="throttled", expires_in_s=FAILED_COOL_OFF_S
        ),
    )
    successor = _attempt(repos, key, 1)
    taken_over = repos.claims.reclaim(seen, attempt=successor)
    failed_again = repos.claims.finalise(
        taken_over,
        Finalisation(
            status=ClaimStatus.FAILED, error_code="throttled", expires_in_s=FAILED_COOL_OFF_S
        ),
    )
    assert (failed_again.status, failed_again.expires_at) == (seen.status, seen.expires_at)
    assert failed_again.version == seen.version + 2

    with pytest.raises(ClaimTaken) as info:
        repos.claims.reclaim(seen, attempt=_attempt(repos, key, 2))
    assert info.value.current is not None
    assert (info.value.current.attempt_id, info.value.current.version) == (
        successor.attempt_id,
        seen.version + 2,
    )
    assert repos.claims.get(seen.pk) == failed_again


def test_stale_holder_cannot_attach_a_case_to_its_successors_claim(ddb, frozen):
    """A worker holding claim version v (attempt A) attaches a case after a successor
    re-claimed the key (version v+1, attempt B): ClaimTaken, and the successor's claim keeps
    its pending_shard, stays visible to the stuck-claim sweep and gets no case_id."""
    repos = repositories()
    stale = _expired_pending(repos, frozen, "attach-1")
    successor = _attempt(repos, "attach-1", 1)
    theirs = repos.claims.reclaim(stale, attempt=successor)
    assert (theirs.version, theirs.attempt_id) == (stale.version + 1, successor.attempt_id)

    with pytest.raises(ClaimTaken) as info:
        repos.claims.attach_case(stale, case_id="case-stale-A", error_code=STUCK_PENDING)
    assert info.value.current is not None
    assert (info.value.current.attempt_id, info.value.current.version) == (
        successor.attempt_id,
        stale.version + 1,
    )

    stored = repos.claims.get(stale.pk)
    assert stored == theirs
    assert (stored.pending_shard, stored.case_id, stored.last_error_code) == (
        pending_shard(stale.pk),
        None,
        None,
    )
    sweepable, _ = repos.claims.pending_candidates(pending_shard(stale.pk), theirs.expires_at + 1)
    assert stale.pk in sweepable

    # Control: the holder of the current claim can attach, so the refusal was the fence.
    attached = repos.claims.attach_case(theirs, case_id="case-B", error_code=STUCK_PENDING)
    assert (attached.case_id, attached.pending_shard) == ("case-B", None)
    sweepable, _ = repos.claims.pending_candidates(pending_shard(stale.pk), theirs.expires_at + 1)
    assert stale.pk not in sweepable


@pytest.mark.dynamodb_local_only
def test_stale_attachers_racing_a_reclaim_never_touch_the_successor(ddb, frozen):
    """16 threads at a barrier (10 rounds): one re-claims an expired PENDING key for a
    successor while 15 attach a case with the stale claim; the re-claim always wins, each
    stale attach either landed on the stale claim before it or is refused naming the
    successor, and the successor's claim is exactly what its re-claim wrote."""
    repos = repositories()
    refused = 0
    for round_no in range(ROUNDS):
        key = f"attach-race-{round_no}"
        stale = _expired_pending(repos, frozen, key)
        successor = _attempt(repos, key, 1)
        calls: list[Callable[[], Claim]] = [lambda: repos.claims.reclaim(stale, attempt=successor)]
        calls += [
            lambda n=n: repos.claims.attach_case(
                stale, case_id=f"case-{round_no}-{n}", error_code=STUCK_PENDING
            )
            for n in range(1, RACERS)
        ]

        wins, taken = _race(calls)
        assert 0 in wins, "the re-claim was refused"
        theirs = wins.pop(0)
        assert (theirs.attempt_id, theirs.version) == (successor.attempt_id, stale.version + 1)
        for attached in wins.values():
            # Landed before the re-claim, on the stale holder's own claim.
            assert (attached.attempt_id, attached.version) == (stale.attempt_id, stale.version)
        for late in taken.values():
            assert late.current is not None
            assert (late.current.attempt_id, late.current.version) == (
                successor.attempt_id,
                stale.version + 1,
            )
        refused += len(taken)

        stored = repos.claims.get(stale.pk)
        assert stored == theirs
        assert (stored.pending_shard, stored.case_id, stored.last_error_code) == (
            pending_shard(stale.pk),
            None,
            None,
        )
    # The fence was exercised: some stale attaches came after the re-claim.
    assert refused > 0


def test_stale_holder_cannot_complete_its_successors_claim(ddb, frozen):
    """A worker whose claim was re-claimed by a successor commits late: its transaction is
    cancelled on the claim's completion fence and writes nothing, its finalise is refused,
    and the successor's claim is untouched and still commits."""
    repos = repositories()
    stale = _expired_pending(repos, frozen, "complete-1")
    successor = _attempt(repos, "complete-1", 1)
    theirs = repos.claims.reclaim(stale, attempt=successor)

    items, pledge = intake.commit_items(repos, stale)
    with pytest.raises(ClientError) as info:
        repos.client.transact_write_items(
            TransactItems=items, ClientRequestToken=stale.request_token
        )
    assert info.value.response["Error"]["Code"] == "TransactionCanceledException"
    reasons = [r.get("Code", "None") for r in info.value.response["CancellationReasons"]]
    [claim_at] = [
        i
        for i, item in enumerate(items)
        if item.get("Update", {}).get("TableName") == ddb.tables.idempotency_keys
    ]
    assert reasons[claim_at] == "ConditionalCheckFailed"
    assert pledges(ddb) == []
    assert ledger_total(ddb) == (Decimal("0"), 0)
    assert audit_events(ddb) == []
    assert repos.claims.get(stale.pk) == theirs

    for status in (ClaimStatus.COMPLETED, ClaimStatus.FAILED):
        with pytest.raises(ClaimTaken) as refused:
            repos.claims.finalise(
                stale,
                Finalisation(
                    status=status,
                    response_body=pledge.api_body() if status == ClaimStatus.COMPLETED else None,
                    error_code="late" if status == ClaimStatus.FAILED else None,
                    expires_in_s=FAILED_COOL_OFF_S,
                ),
            )
        assert refused.value.current is not None
        assert refused.value.current.attempt_id == successor.attempt_id
    assert repos.claims.get(stale.pk) == theirs

    # Control: the successor's own commit goes through, so the refusal was the fence.
    assert intake.pledge_commit(repos, theirs).kind == OutcomeKind.CREATED
    done = repos.claims.get(stale.pk)
    assert (done.status, done.attempt_id, done.version) == (
        ClaimStatus.COMPLETED,
        successor.attempt_id,
        theirs.version + 1,
    )
    assert len(pledges(ddb)) == 1

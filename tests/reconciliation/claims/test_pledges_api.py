"""Every row of docs/design.md §4's outcome table, through the HTTP API, on each engine that
honours what the row needs."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from reconciliation import clock
from reconciliation.claims.models import ClaimStatus
from reconciliation.claims.repository import Finalisation
from reconciliation.dynamo.client import reset_clients
from reconciliation.dynamo.local import free_port
from reconciliation.simulation import faults
from tests.conftest import pledge_body
from tests.fault_helpers import plan_everywhere
from tests.helpers import (
    audit_events,
    cases,
    claims,
    ledger_total,
    nothing_written,
    pledges,
    repositories,
    token_spent_elsewhere,
)


def _plan(settings, **probabilities: float) -> None:
    """Every client of the process injects these faults, as in a faulty server."""
    plan_everywhere(settings, probabilities)


# Throttling and conflict faults answer at the HTTP layer. moto's in-process stub answers
# at that same layer and applies the write anyway, so these run where a real HTTP call is
# made: DynamoDB Local (docs/design.md §10: the engine never raises them by itself).
http_faults = pytest.mark.dynamodb_local_only


def test_committed_pledge_is_201_with_the_pledge(ddb, api):
    """A new key commits: 201, the pledge as body, one pledge, ledger +amount, a receipt."""
    response = api.post("k-1", pledge_body())
    assert response.status_code == 201
    body = response.json()
    assert body == {
        "intent_id": "k-1",
        "donor_ref": "D-1001",
        "fund": "GENERAL",
        "amount": "25.00",
        "currency": "USD",
        "status": "RECORDED",
        "created_at": body["created_at"],
    }
    assert response["Location"] == "/api/v1/pledges/k-1"
    assert [p["intent_id"] for p in pledges(ddb)] == ["acme#k-1"]
    assert ledger_total(ddb) == (Decimal("25.00"), 1)
    [receipt] = audit_events(ddb, "PLEDGE#")
    assert receipt["stream"] == "PLEDGE#acme#k-1" and receipt["seq"] == 1
    assert receipt["action"] == "pledge_recorded"
    [claim] = claims(ddb)
    assert claim["status"] == "COMPLETED" and claim["version"] == 2
    assert "pending_shard" not in claim


def test_replay_same_payload_is_200_with_same_body(ddb, api):
    """Same key, same body (even written differently): 200, identical body, replay header."""
    first = api.post("k-2", pledge_body())
    again = api.post("k-2", pledge_body(amount="25", currency="usd"))
    assert again.status_code == 200
    assert again["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert len(pledges(ddb)) == 1
    assert ledger_total(ddb) == (Decimal("25.00"), 1)


def test_same_key_different_payload_is_422_and_writes_nothing(ddb, api):
    """Same key, changed amount: 422 idempotency_key_reused, nothing further written."""
    api.post("k-3", pledge_body())
    before = (pledges(ddb), claims(ddb), audit_events(ddb))
    response = api.post("k-3", pledge_body(amount="26.00"))
    assert response.status_code == 422
    assert response.json()["error"] == "idempotency_key_reused"
    assert (pledges(ddb), claims(ddb), audit_events(ddb)) == before
    assert ledger_total(ddb) == (Decimal("25.00"), 1)


def test_pending_claim_not_expired_is_409_with_retry_after(ddb, api, settings):
    """A worker died after claiming: the next request within the lease gets 409 + Retry-After."""
    _plan(settings, crash_after_claim=1.0)
    with pytest.raises(faults.SimulatedCrash):
        api.post("k-4", pledge_body())
    faults.set_plan(None)
    response = api.post("k-4", pledge_body())
    assert response.status_code == 409
    assert response.json()["error"] == "request_in_progress"
    assert pledges(ddb) == []
    [claim] = claims(ddb)
    assert claim["status"] == "PENDING" and claim["pending_shard"].startswith("P#")
    # Retry-After is the rest of the claim's lease, counted by the server's clock.
    remaining = claim["expires_at"] - clock.epoch()
    assert remaining <= int(response["Retry-After"]) <= remaining + 2


def test_failed_claim_not_expired_is_409_then_reclaimable(ddb, api, settings):
    """A FAILED claim inside its cool-off is 409; after it, the same key re-claims as a new
    attempt, with a token of its own (a re-claim is a different transaction), and commits."""
    _plan(settings, crash_after_claim=1.0)
    with pytest.raises(faults.SimulatedCrash):
        api.post("k-5", pledge_body())
    faults.set_plan(None)
    repos = repositories()
    claim = repos.claims.get("acme#create_pledge#k-5")
    repos.claims.finalise(
        claim, Finalisation(status=ClaimStatus.FAILED, error_code="test", expires_in_s=30)
    )
    response = api.post("k-5", pledge_body())
    assert response.status_code == 409
    assert response.json()["error"] == "request_in_progress"
    with clock.travel(31):
        response = api.post("k-5", pledge_body())
    assert response.status_code == 201
    [stored] = claims(ddb)
    [pledge] = pledges(ddb)
    assert stored["request_token"] != claim.request_token
    assert pledge["request_token"] == stored["request_token"]
    assert stored["token_issued_at"] > claim.token_issued_at
    assert stored["version"] == claim.version + 3  # FAILED, re-claimed, COMPLETED


BAD_INPUTS = [
    ("missing key", None, pledge_body(), "Idempotency-Key"),
    ("empty key", "", pledge_body(), "Idempotency-Key"),
    ("overlong key", "k" * 256, pledge_body(), "Idempotency-Key"),
    ("control char in key", "bad\x01key", pledge_body(), "Idempotency-Key"),
    ("malformed JSON", "k", b"{not json", "body"),
    ("JSON array", "k", b"[1, 2]", "body"),
    ("body over 16 KiB", "k", json.dumps({**pledge_body(), "pad": "x" * 17000}), "body"),
    ("unknown field", "k", {**pledge_body(), "donor_name": "Ada"}, "donor_name"),
    ("missing field", "k", {"fund": "GENERAL", "amount": "1.00", "currency": "USD"}, "donor_ref"),
    ("amount zero", "k", pledge_body(amount="0.00"), "amount"),
    ("amount negative", "k", pledge_body(amount="-5"), "amount"),
    ("amount three decimals", "k", pledge_body(amount="1.005"), "amount"),
    ("amount not a number", "k", pledge_body(amount="ten"), "amount"),
    ("amount as JSON number", "k", {**pledge_body(), "amount": 25}, "amount"),
    ("amount exponent", "k", pledge_body(amount="1e3"), "amount"),
    ("unknown currency", "k", pledge_body(currency="XYZ"), "currency"),
    ("e-mail as donor ref", "k", pledge_body(donor_ref="ada@example.org"), "donor_ref"),
    ("name as donor ref", "k", pledge_body(donor_ref="Ada Lovelace"), "donor_ref"),
    ("fractional yen", "k", pledge_body(currency="JPY", amount="10.50"), "amount"),
    ("deeply nested JSON", "k", b"[" * 5000 + b"]" * 5000, "body"),
    ("fund with trailing newline", "k", pledge_body(fund="GENERAL\n"), "fund"),
    ("donor ref with trailing newline", "k", pledge_body(donor_ref="D-1\n"), "donor_ref"),
    ("key with trailing newline", "k\n", pledge_body(), "Idempotency-Key"),
    ("look-alike currency", "k", pledge_body(currency="u\u017fd"), "currency"),
    ("zero-width space in fund", "k", pledge_body(fund="GEN\u200bERAL"), "fund"),
]


@pytest.mark.parametrize("label,key,body,field", BAD_INPUTS, ids=[row[0] for row in BAD_INPUTS])
def test_bad_input_is_400_with_field_error_and_writes_nothing(ddb, api, label, key, body, field):
    """Each kind of bad input: 400 naming the field, and no item in any table."""
    response = api.post(key, body)
    assert response.status_code == 400, response.content
    assert field in response.json()["fields"]
    assert nothing_written(ddb)


@pytest.mark.engines("moto")
def test_get_with_a_trailing_newline_in_the_key_is_400(ddb, api):
    """GET /api/v1/pledges/k%0A is not the pledge of key "k" nor a key of its own: 400."""
    assert api.post("k", pledge_body()).status_code == 201
    response = api.get("k\n")
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_key"


@pytest.mark.engines("moto")
def test_missing_or_wrong_token_is_401(ddb, api):
    """No bearer token or an unknown one: 401, nothing written."""
    api.token = "plg_wrong"
    assert api.post("k-6", pledge_body()).status_code == 401
    api.client.defaults.pop("HTTP_AUTHORIZATION", None)
    response = api.client.post("/api/v1/pledges", data="{}", content_type="application/json")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert nothing_written(ddb)


@http_faults
def test_throttled_past_budget_is_503_with_retry_after(ddb, api, settings):
    """Every call throttled: 503 throttled with Retry-After, and no pledge."""
    _plan(settings, throttle=1.0)
    response = api.post("k-7", pledge_body())
    assert response.status_code == 503
    assert response.json()["error"] == "throttled"
    assert int(response["Retry-After"]) >= 1
    faults.set_plan(None)
    assert pledges(ddb) == []


@http_faults
def test_conflict_past_budget_is_409_and_opens_cancelled_case(ddb, api, settings):
    """TransactionConflict on every attempt: 409 with Retry-After, claim FAILED (cool-off),
    a CANCELLED_TRANSACTION case holding the decoded reasons."""
    _plan(settings, transaction_conflict=1.0)
    response = api.post("k-8", pledge_body())
    faults.set_plan(None)
    assert response.status_code == 409
    assert response.json()["error"] == "transaction_conflict"
    [case] = cases(ddb)
    assert case["case_type"] == "CANCELLED_TRANSACTION"
    decoded = json.loads(case["decoded"])
    assert [(r["table"], r["code"], r["branch"]) for r in decoded] == [
        ("pledges", "None", "none"),
        ("ledger", "TransactionConflict", "retryable"),
        ("audit_events", "None", "none"),
        ("idempotency_keys", "None", "none"),
        ("requests", "None", "none"),
    ]
    [claim] = claims(ddb)
    assert claim["status"] == "FAILED" and claim["case_id"] == case["case_id"]
    assert pledges(ddb) == []


def test_ambiguous_timeout_is_202_outcome_unknown_and_get_recovers(ddb, api, settings):
    """The commit succeeds but its answer is lost: 202 outcome_unknown (not an error), an
    AMBIGUOUS_TIMEOUT case, and GET answers from the durable record."""
    _plan(settings, ambiguous_after_commit=1.0)
    response = api.post("k-9", pledge_body())
    faults.set_plan(None)
    assert response.status_code == 202
    body = response.json()
    assert body["error"] == "outcome_unknown"
    assert response["Location"] == "/api/v1/pledges/k-9"
    [case] = cases(ddb)
    assert case["case_type"] == "AMBIGUOUS_TIMEOUT" and body["case_id"] == case["case_id"]
    recovered = api.get("k-9")
    assert recovered.status_code == 200
    assert recovered.json()["amount"] == "25.00"
    # A client retry with the same key now replays; nothing is written twice.
    assert api.post("k-9", pledge_body()).status_code == 200
    assert ledger_total(ddb) == (Decimal("25.00"), 1)


def test_get_unknown_pledge_is_404_and_other_tenant_cannot_read(ddb, api):
    """GET of a key never committed is 404; another tenant's token never sees the pledge."""
    from dashboard.tenancy.models import ApiToken

    assert api.get("nope").status_code == 404
    api.post("shared-key", pledge_body())
    _, other = ApiToken.issue("globex")
    api.token = other
    assert api.get("shared-key").status_code == 404
    # The other tenant's own pledge under the same key is a different intent.
    assert api.post("shared-key", pledge_body(amount="1.00")).status_code == 201
    assert sorted(p["intent_id"] for p in pledges(ddb)) == ["acme#shared-key", "globex#shared-key"]


@pytest.mark.token_semantics
def test_token_mismatch_is_422_and_opens_token_mismatch_case(ddb, api):
    """Another transaction used this request's token within 10 minutes: the commit raises
    IdempotentParameterMismatchException → 422, a TOKEN_MISMATCH case, nothing recorded."""
    with token_spent_elsewhere(ddb):
        response = api.post("k-10", pledge_body())
    assert response.status_code == 422
    assert response.json()["error"] == "token_parameter_mismatch"
    [case] = cases(ddb)
    assert case["case_type"] == "TOKEN_MISMATCH"
    assert response.json()["case_id"] == case["case_id"]
    assert pledges(ddb) == []


def test_api_answers_within_5s_when_dynamodb_is_unreachable(db, api, settings):
    """Every DynamoDB call fails (nothing listens): 503 within 5 s, not 25 s of backoff."""
    import time

    settings.DYNAMODB_ENDPOINT_URL = f"http://127.0.0.1:{free_port()}"
    settings.DDB_REGIONS = ""
    reset_clients()
    started = time.monotonic()
    response = api.post("k-11", pledge_body())
    elapsed = time.monotonic() - started
    reset_clients()
    assert response.status_code == 503
    assert response.json()["error"] == "dynamodb_unavailable"
    assert elapsed < 5
    # The recovery GET must not say "not found" (or 500) when it cannot know.
    recovered = api.get("k-11")
    reset_clients()
    assert recovered.status_code == 503 and int(recovered["Retry-After"]) >= 1


@pytest.mark.engines("dynamodb_local")
def test_api_answers_within_5s_when_every_call_is_throttled(ddb, api, settings):
    """Every call throttled through both retry layers: the answer still comes within 5 s."""
    import time

    _plan(settings, throttle=1.0)
    started = time.monotonic()
    response = api.post("k-12", pledge_body())
    elapsed = time.monotonic() - started
    faults.set_plan(None)
    assert response.status_code == 503
    assert elapsed < 5

"""The intake request's schema version (``Pledge-Version``): a registry of
versions and their normalisation rules; the current version is the rules every stored
hash was computed by; an unknown or malformed header is a 400 that writes nothing; the
claim and the pledge store the version, and a replay is hashed by the claim's rules."""

from __future__ import annotations

import hashlib

import pytest

from reconciliation.claims.request import InvalidRequest, PledgeRequest, parse_fields
from reconciliation.claims.versions import (
    FIRST,
    VERSIONS,
    PledgeVersion,
    parse_pledge_version,
)
from tests.conftest import pledge_body
from tests.helpers import acting, claims, nothing_written, pledges

pytestmark = pytest.mark.engines("moto")


# Fixed bodies and the canonical text the code before versions (main at 04fa7d6,
# ``PledgeRequest.canonical_json``) hashed for each, written out literally.
BEFORE_VERSIONS = [
    (pledge_body(), '{"amount":"25.00","currency":"USD","donor_ref":"D-1001","fund":"GENERAL"}'),
    (
        pledge_body(amount="25", currency="usd", fund="general"),
        '{"amount":"25.00","currency":"USD","donor_ref":"D-1001","fund":"GENERAL"}',
    ),
    (
        pledge_body(amount="1000", currency="JPY"),
        '{"amount":"1000","currency":"JPY","donor_ref":"D-1001","fund":"GENERAL"}',
    ),
    (
        pledge_body(amount="1.5", currency="BHD"),
        '{"amount":"1.500","currency":"BHD","donor_ref":"D-1001","fund":"GENERAL"}',
    ),
]


@pytest.mark.parametrize(("body", "canonical"), BEFORE_VERSIONS)
def test_the_current_version_hashes_as_the_code_before_versions(body, canonical):
    """Every payload hash already stored stays byte-identical: the current (first) version
    hashes a fixed body exactly as the code before versions did (and as the golden value
    of tests/dashboard/test_intake_funds.py)."""
    request = parse_fields(body)
    assert VERSIONS.current is FIRST
    assert FIRST.canonical_json(request) == canonical
    assert FIRST.payload_hash(request) == hashlib.sha256(canonical.encode()).hexdigest()
    assert FIRST.payload_hash(parse_fields(pledge_body())) == (
        "c57a71113761c74386744d2c4bae8809933b16e1cb08c54ee46f4c4346a582f0"
    )


def test_the_header_names_a_known_version_or_the_current_one():
    assert parse_pledge_version(None) is VERSIONS.current
    assert parse_pledge_version("") is VERSIONS.current
    assert parse_pledge_version(FIRST.name) is FIRST
    assert parse_pledge_version(f'"{FIRST.name}"') is FIRST


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("2019-01-01", "unknown_pledge_version"),
        ("2999-12-31", "unknown_pledge_version"),
        ("v2", "invalid_pledge_version"),
        ("2026-12-01; x", "invalid_pledge_version"),
        ("２０２６-１２-０１", "invalid_pledge_version"),
    ],
)
def test_a_bad_header_is_refused_by_code(raw, code):
    with pytest.raises(InvalidRequest) as refused:
        parse_pledge_version(raw)
    assert refused.value.code == code
    assert set(refused.value.fields) == {"Pledge-Version"}


@pytest.mark.parametrize(
    ("header", "code"),
    [("1999-01-01", "unknown_pledge_version"), ("latest", "invalid_pledge_version")],
)
def test_an_unknown_or_malformed_version_is_400_and_writes_nothing(ddb, api, header, code):
    """Refused before the body counts: no claim, no pledge, no ledger, no audit event."""
    response = api.post("v-bad", pledge_body(), HTTP_PLEDGE_VERSION=header)
    assert response.status_code == 400
    assert response.json()["error"] == code
    assert "Pledge-Version" in response.json()["fields"]
    assert nothing_written(ddb)


def test_a_missing_header_is_the_current_version_stored_on_claim_and_pledge(ddb, api):
    assert api.post("v-none", pledge_body()).status_code == 201
    assert api.post("v-named", pledge_body(), HTTP_PLEDGE_VERSION=FIRST.name).status_code == 201
    assert {c["pledge_version"] for c in claims(ddb)} == {FIRST.name}
    assert {p["pledge_version"] for p in pledges(ddb)} == {FIRST.name}
    # The API's answer is unchanged: the version is a stored fact, not a new field.
    assert "pledge_version" not in api.get("v-none").json()


def _folded_rules(request: PledgeRequest) -> dict[str, str]:
    """A later version's rule: donor refs compared in any letter case."""
    return {**request.normalised(), "donor_ref": request.donor_ref.upper()}


LATER = PledgeVersion(name="2027-06-01", summary="Donor refs upper-case.", normalise=_folded_rules)


def test_an_identical_replay_stays_a_replay_after_the_default_version_changes(ddb, api):
    """A claim hashed by the first version's rules; the default becomes a version whose
    normalisation differs: the identical body, sent again with or without a header, is
    hashed by the claim's version and replayed (200), not refused as a reused key."""
    body = pledge_body(donor_ref="d-1001")
    assert api.post("v-replay", body).status_code == 201
    with VERSIONS.extended(LATER, current=LATER.name):
        assert LATER.payload_hash(parse_fields(body)) != FIRST.payload_hash(parse_fields(body))
        for headers in ({}, {"HTTP_PLEDGE_VERSION": LATER.name}):
            again = api.post("v-replay", body, **headers)
            assert again.status_code == 200, again.content
            assert again["Idempotent-Replayed"] == "true"
        changed = api.post("v-replay", pledge_body(donor_ref="d-1002"))
        assert changed.status_code == 422
        # A new key is claimed under the new default, and stored with its name.
        assert api.post("v-later", body).status_code == 201
    by_key = {c["idempotency_key"]: c for c in claims(ddb)}
    assert by_key["v-replay"]["pledge_version"] == FIRST.name
    assert by_key["v-later"]["pledge_version"] == LATER.name
    assert by_key["v-later"]["payload_hash"] == LATER.payload_hash(parse_fields(body))
    assert len(pledges(ddb)) == 2


def test_a_claim_stored_before_versions_reads_as_the_first_version(ddb, api):
    """A claim item without ``pledge_version`` (written before versions existed) is judged
    by the first version's rules, even when the default has changed since."""
    body = pledge_body(donor_ref="d-2002")
    assert api.post("v-old", body).status_code == 201
    [claim] = claims(ddb)
    ddb.client.update_item(
        TableName=ddb.tables.idempotency_keys,
        Key={"pk": {"S": claim["pk"]}},
        UpdateExpression="REMOVE pledge_version",
    )
    assert "pledge_version" not in claims(ddb)[0]
    with VERSIONS.extended(LATER, current=LATER.name):
        again = api.post("v-old", body)
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"


def test_a_claim_stored_before_versions_commits_the_same_transaction(ddb):
    """A claim without ``pledge_version`` (in flight across the upgrade) commits a pledge
    without one: a commit retried under its token sends the transaction the code before
    versions sent, never a parameter mismatch. A versioned claim's pledge names it."""
    from dataclasses import replace

    from reconciliation.claims.intake import commit_items
    from reconciliation.claims.models import ClaimBody, ClaimKey
    from reconciliation.claims.repository import ClaimRepository
    from reconciliation.stores import home_store

    request = parse_fields(pledge_body())
    claim = ClaimRepository(home_store("x")).new_claim(
        key=ClaimKey.of_pledge("acme", "v-flight"),
        body=ClaimBody(request.payload_hash, request.normalised()),
        correlation_id="",
        client_address="",
    )
    store = home_store(claim.pk)
    items, pledge = commit_items(store, claim)
    assert pledge.pledge_version is None
    assert "pledge_version" not in items[0]["Put"]["Item"]
    items, pledge = commit_items(store, replace(claim, pledge_version=FIRST.name))
    assert items[0]["Put"]["Item"]["pledge_version"] == {"S": FIRST.name}


@pytest.mark.django_db(databases=[])
def test_a_case_retry_claims_afresh_under_the_cases_version(ddb):
    """A stuck claim stored under a later version, removed by TTL before staff retry its
    case: the retry claims the key afresh under the version the case kept
    (``case.request.pledge_version``), hashed by its rules, and the pledge names it, even
    after the default went back to the first version."""
    from reconciliation.cases.vocabulary import Disposition
    from reconciliation.casework.dispositions import case_dispose
    from tests.helpers import repositories
    from tests.reconciliation.factories import stuck_case

    with VERSIONS.extended(LATER, current=LATER.name):
        case = stuck_case("v-retry", donor_ref="d-3003")
        assert case.request.pledge_version == LATER.name
        [claim] = claims(ddb)
        ddb.client.delete_item(
            TableName=ddb.tables.idempotency_keys, Key={"pk": {"S": claim["pk"]}}
        )
        with VERSIONS.extended(current=FIRST.name):
            result = case_dispose(
                disposition=Disposition.RETRY_COMMIT,
                **acting("ada").on(
                    case,
                    reason_code="EVIDENCE_CONFIRMS",
                    reason_text="Checked the consistent reads.",
                ),
            )
            assert result.applied
            assert repositories().cases.get(case.case_id).state == "RESOLVED"
            [again] = claims(ddb)
            assert again["pledge_version"] == LATER.name
            body = parse_fields(pledge_body(donor_ref="d-3003"))
            assert again["payload_hash"] == LATER.payload_hash(body)
            assert [p["pledge_version"] for p in pledges(ddb)] == [LATER.name]

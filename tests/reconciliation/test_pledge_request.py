"""Normalisation and hashing of intake requests, and the Idempotency-Key header."""

from __future__ import annotations

import pytest

from reconciliation.pledge_request import (
    InvalidRequest,
    parse_body,
    parse_fields,
    parse_idempotency_key,
)
from tests.conftest import pledge_body


def test_equivalent_bodies_normalise_to_one_payload_hash():
    """Amount written 25, 25.0 or 25.00 and currency in any case: one canonical form."""
    forms = [
        pledge_body(amount="25"),
        pledge_body(amount="25.0", currency="usd"),
        pledge_body(amount="025.00", fund="general"),
    ]
    parsed = [parse_fields(f) for f in forms]
    assert {p.payload_hash for p in parsed} == {parsed[0].payload_hash}
    assert parsed[0].normalised() == {
        "amount": "25.00",
        "currency": "USD",
        "donor_ref": "D-1001",
        "fund": "GENERAL",
    }
    assert parsed[0].canonical_json() == (
        '{"amount":"25.00","currency":"USD","donor_ref":"D-1001","fund":"GENERAL"}'
    )


def test_different_amounts_hash_differently():
    """A changed amount is a different payload."""
    assert (
        parse_fields(pledge_body()).payload_hash
        != parse_fields(pledge_body(amount="25.01")).payload_hash
    )


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("abc", "abc"),
        ('"quoted-key"', "quoted-key"),
        ("x" * 255, "x" * 255),
        ("with inner space", "with inner space"),
    ],
)
def test_idempotency_key_accepts_printable_and_structured_string(raw, expected):
    """Printable ASCII up to 255 characters; an sf-string in quotes is unquoted."""
    assert parse_idempotency_key(raw) == expected


@pytest.mark.parametrize("raw", [None, "", " lead", "trail ", "x" * 256, "tab\there", "é"])
def test_idempotency_key_rejects_the_rest(raw):
    """Missing, empty, outer spaces, too long, control or non-ASCII characters: rejected."""
    with pytest.raises(InvalidRequest) as info:
        parse_idempotency_key(raw)
    assert list(info.value.fields) == ["Idempotency-Key"]


def test_errors_name_every_bad_field_at_once():
    """Several problems: every field is named in one answer."""
    with pytest.raises(InvalidRequest) as info:
        parse_body(b'{"donor_ref": "a b", "fund": "", "amount": "0", "currency": "ZZZ", "x": 1}')
    assert set(info.value.fields) == {"x"}
    with pytest.raises(InvalidRequest) as info:
        parse_body(b'{"donor_ref": "a b", "fund": "", "amount": "0", "currency": "ZZZ"}')
    assert set(info.value.fields) == {"donor_ref", "fund", "amount", "currency"}

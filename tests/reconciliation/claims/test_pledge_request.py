"""Normalisation and hashing of intake requests, and the Idempotency-Key header."""

from __future__ import annotations

import json

import pytest

from reconciliation.claims.request import (
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


@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 5000 + b"]" * 5000,
        b'{"donor_ref": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        b'{"a":' * 2000 + b"1" + b"}" * 2000,
    ],
    ids=["array", "inside a field", "objects"],
)
def test_deeply_nested_body_is_refused_with_a_clear_code(raw):
    """JSON nested thousands deep (a RecursionError in the parser): refused as
    ``body_too_deep`` naming the body, before anything is parsed further."""
    with pytest.raises(InvalidRequest) as info:
        parse_body(raw)
    assert info.value.code == "body_too_deep"
    assert list(info.value.fields) == ["body"]


def test_nesting_inside_strings_does_not_count():
    """Brackets inside JSON strings (escaped quotes included) are text, not nesting."""
    body = pledge_body(donor_ref="D-1")
    raw = json.dumps({**body, "note": '\\"[' * 100}).encode()
    with pytest.raises(InvalidRequest) as info:
        parse_body(raw)
    assert info.value.fields == {"note": "unknown field"}


WHOLE_STRING_CASES = [
    ("donor_ref", "D-1001\n"),
    ("donor_ref", "D-1001\r\n"),
    ("donor_ref", "D-\x001001"),
    ("donor_ref", "D-1001\u200b"),
    ("donor_ref", "\u202eD-1001"),
    ("donor_ref", "Ｄ-1001"),
    ("fund", "GENERAL\n"),
    ("fund", "GENERAL\x7f"),
    ("fund", "GENERAL\u00ad"),
    ("fund", "ＧＥＮＥＲＡＬ"),
    ("fund", "GENERAL\u0130"),
    ("amount", "25.00\n"),
    ("amount", "２５.00"),
    ("amount", "25.00\x00"),
    ("currency", "uſd"),
    ("currency", "USD\n"),
    ("currency", "ＵＳＤ"),
    ("currency", "usd\u200d"),
]


@pytest.mark.parametrize("field,value", WHOLE_STRING_CASES)
def test_fields_match_whole_strings_ascii_only_and_no_control_characters(field, value):
    """A trailing newline, a control or format character, or a non-ASCII look-alike
    (``uſd``, full-width letters and digits): refused naming the field, never folded
    into another code."""
    with pytest.raises(InvalidRequest) as info:
        parse_fields(pledge_body(**{field: value}))
    assert list(info.value.fields) == [field]


def test_compatibility_look_alikes_are_named_in_the_error():
    """The error says what NFKC makes of a look-alike, so the client knows what to send."""
    with pytest.raises(InvalidRequest) as info:
        parse_fields(pledge_body(currency="uſd"))
    assert "'usd'" in info.value.fields["currency"]
    with pytest.raises(InvalidRequest) as info:
        parse_fields(pledge_body(fund="GENERAL\n"))
    assert "control" in info.value.fields["fund"]


@pytest.mark.parametrize("raw", ["k\n", "k\r\n", '"k"\n', "k\x85", "k\u2028", "ｋ"])
def test_idempotency_key_matches_the_whole_string(raw):
    """A trailing newline (``$`` matched before it), NEL, a line separator or a full-width
    letter: refused."""
    with pytest.raises(InvalidRequest) as info:
        parse_idempotency_key(raw)
    assert list(info.value.fields) == ["Idempotency-Key"]

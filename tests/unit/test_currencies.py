"""ISO 4217 currencies and their minor units, and how amounts are written
(reconciliation/currencies.py)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from reconciliation.currencies import (
    ISO_4217,
    LEGACY_PLACES,
    WITHDRAWN,
    amount_text,
    decimal_places,
    minor_units,
)


@pytest.mark.parametrize(
    ("currency", "places"), [("USD", 2), ("EUR", 2), ("JPY", 0), ("KRW", 0), ("BHD", 3)]
)
def test_minor_units_follow_iso_4217(currency, places):
    """Each current currency has the places ISO's list gives it."""
    assert currency in ISO_4217
    assert minor_units(currency) == places


def test_funds_units_of_account_and_withdrawn_codes_are_not_accepted():
    """ISO's fund codes and units of account are no currency a donor pays in; a withdrawn
    currency keeps its places for stored data; an unknown code reads with two."""
    assert not {"BOV", "CHE", "USN", "UYW", "XAD"} & ISO_4217
    assert not set(WITHDRAWN) & ISO_4217
    assert minor_units("BGN") == 2
    assert minor_units("QQQ") == LEGACY_PLACES == 2


@pytest.mark.parametrize(
    ("amount", "currency", "text"),
    [
        ("25", "USD", "25.00"),
        ("1000", "JPY", "1000"),
        ("1.5", "BHD", "1.500"),
        ("1000.00", "JPY", "1000"),  # trailing zeros are no digits lost
        ("12.345", "USD", "12.345"),  # recorded with more places: kept
    ],
)
def test_amounts_are_written_with_their_currency_places(amount, currency, text):
    """An amount is written with its currency's places, never losing a digit."""
    assert amount_text(Decimal(amount), currency) == text


def test_places_can_be_asked_for():
    """The legacy two-place form (claims hashed before per-currency places)."""
    assert amount_text(Decimal("1000"), "JPY", LEGACY_PLACES) == "1000.00"
    assert decimal_places(Decimal("1.50")) == 2
    assert decimal_places(Decimal("100")) == 0
    assert decimal_places(Decimal("1E+2")) == 0

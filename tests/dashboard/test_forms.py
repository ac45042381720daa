"""The queue filter form is the one place a person's filter text is parsed: what it
cleans is the QueueFilters the queue read takes."""

from __future__ import annotations

from decimal import Decimal

from dashboard.staff.forms import QueueFilterForm
from reconciliation.casework.selectors import QueueFilters


def test_cleaned_filters_are_what_the_queue_read_takes():
    form = QueueFilterForm({"fund": " general ", "min_amount": "12.50", "min_age_h": "1.5"})
    assert form.is_valid(), form.errors
    assert form.filters(assignee="ada") == QueueFilters(
        fund="GENERAL", min_amount=Decimal("12.50"), min_age_s=5400, assignee=""
    )
    mine = QueueFilterForm({"mine": "on"})
    assert mine.is_valid() and mine.filters(assignee="ada") == QueueFilters(assignee="ada")


def test_bad_filters_are_named_field_by_field():
    form = QueueFilterForm(
        {"fund": "GEN ERAL", "min_amount": "lots", "min_age_h": "-1", "q": "no-hash"}
    )
    assert not form.is_valid()
    assert form.errors == {
        "fund": ["letters, digits, '_' or '-' (up to 32)"],
        "min_amount": ["a non-negative number"],
        "min_age_h": ["hours, a number from 0"],
        "q": ["Enter the intent id as tenant#key, e.g. acme#42."],
    }


def test_a_fund_is_at_most_32_characters_after_upper_casing():
    """ "ß" upper-cases to "SS": 32 of them are 64 characters, which no fund may be."""
    form = QueueFilterForm({"fund": "ß" * 32})
    assert not form.is_valid() and "fund" in form.errors

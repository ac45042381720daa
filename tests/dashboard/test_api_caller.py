"""Intake reads its caller and the caller's funds in one database query
(``ApiToken.authenticate``), with the same answers as the token and fund lookups it replaces."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.management import call_command

from dashboard.tenancy.models import ApiToken, Caller, Fund, TokenRefusal
from tests.conftest import pledge_body

pytestmark = pytest.mark.django_db


def registered(tenant: str) -> list:
    """The tenant's funds as the ORM reads them (the lookup ``authenticate`` replaced)."""
    return [f.as_rule() for f in Fund.objects.filter(tenant__name=tenant)]


def test_a_replay_makes_one_database_query(ddb, api, django_assert_num_queries):
    """A replay, like a new pledge (tests/dashboard/test_intake_funds.py), reads the token
    with its funds and nothing else: no session, user or second fund read."""
    assert api.post("q-1", pledge_body()).status_code == 201
    with django_assert_num_queries(1):
        assert api.post("q-1", pledge_body()).status_code == 200


def _funds(raw: str) -> list:
    found = ApiToken.authenticate(raw)
    assert isinstance(found, Caller)
    return found.funds


@pytest.mark.engines("moto")
def test_caller_matches_the_token_and_the_registered_funds(ddb):
    """Funds in several currencies and limits with minor units come back as
    the ORM lists them, in its order, for an active token only."""
    token, raw = ApiToken.issue("acme")
    call_command("add_fund", "RELIEF", tenant="acme", currency="BHD", max_amount="12.345")
    call_command("add_fund", "BUILDING", tenant="acme", currency="JPY", max_amount="1000")
    call_command("add_fund", "BUILDING", tenant="acme", currency="EUR", max_amount="50000.5")
    found = ApiToken.authenticate(raw)
    assert isinstance(found, Caller) and found.tenant == "acme"
    funds = found.funds
    assert funds == registered("acme")
    assert [(f.code, f.currency, f.max_amount) for f in funds] == [
        ("BUILDING", "EUR", Decimal("50000.5")),
        ("BUILDING", "JPY", Decimal("1000")),
        ("GENERAL", "USD", Decimal("1000000")),
        ("RELIEF", "BHD", Decimal("12.345")),
    ]
    assert ApiToken.authenticate(raw + "x") is TokenRefusal.UNKNOWN
    token.revoke()
    assert ApiToken.authenticate(raw) is TokenRefusal.REVOKED


@pytest.mark.engines("moto")
def test_a_tenant_without_funds_is_still_its_caller(ddb):
    """Every fund removed: the token still names its tenant (intake then refuses the
    fund, or replays a known key), with no funds."""
    _, raw = ApiToken.issue("bare")
    Fund.objects.filter(tenant__name="bare").delete()
    found = ApiToken.authenticate(raw)
    assert isinstance(found, Caller) and (found.tenant, found.funds) == ("bare", [])


@pytest.mark.engines("moto")
def test_limits_past_fifteen_digits_read_as_the_orm_reads_them(ddb):
    """SQLite keeps a DECIMAL as a float; Django reads it at 15 significant digits, and
    the caller's query gives the same limit. ``add_fund`` refuses limits that wide, so
    the row is widened in the database, as a hand edit would."""
    _, raw = ApiToken.issue("wide")
    call_command("add_fund", "BIG", tenant="wide", currency="BHD", max_amount="1.000")
    Fund.objects.filter(tenant__name="wide", code="BIG").update(
        max_amount=Decimal("9999999999999.999")
    )

    funds = _funds(raw)

    assert funds == registered("wide")

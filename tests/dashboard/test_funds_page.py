"""The Funds page (``/funds/``): every tenant's funds, their largest single amount and the
intake rate limit, for supervisors and auditors; supervisors register a fund or change
its limit there, audited, instead of only in /admin/."""

from __future__ import annotations

from decimal import Decimal

import pytest

from dashboard.tenancy.models import Fund, Tenant
from tests.helpers import audit_events, sign_in

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]


@pytest.fixture
def acme(ddb):
    return Tenant.objects.provision("acme")


def test_supervisors_and_auditors_read_every_tenants_funds_and_limit(client, acme):
    acme.intake_rate_per_s, acme.intake_burst = 5.0, 20
    acme.save()
    for role in ("supervisor", "auditor"):
        client.logout()
        sign_in(client, role, username=f"funds-{role}")
        html = client.get("/funds/").content.decode()
        assert "acme" in html and "GENERAL" in html, role
        assert "5 requests/s" in html and "burst 20" in html, role
        assert ('action="/funds/set/"' in html) is (role == "supervisor"), role


def test_a_supervisor_registers_a_fund_and_changes_its_limit_audited(ddb, client, acme):
    sign_in(client, "supervisor", username="funds-sup")
    form = {"tenant": "acme", "code": "capital", "currency": "eur", "max_amount": "5000"}
    added = client.post("/funds/set/", form)
    assert added.status_code == 302 and added["Location"] == "/funds/"
    fund = Fund.objects.get(tenant=acme, code="CAPITAL", currency="EUR")
    assert fund.max_amount == Decimal("5000")
    changed = client.post("/funds/set/", {**form, "max_amount": "7500.50"})
    assert changed.status_code == 302
    fund.refresh_from_db()
    assert fund.max_amount == Decimal("7500.50")
    actions = [e["action"] for e in audit_events(ddb) if e["stream"] == "TENANT#acme"]
    assert actions.count("fund_registered") >= 1 and actions.count("fund_limit_changed") == 1
    assert "CAPITAL" in client.get("/funds/").content.decode()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("code", ""),
        ("currency", "XXQ"),
        ("max_amount", "nan"),
        ("max_amount", "-1"),
        ("max_amount", "1e400"),
        ("tenant", "nobody-such"),
    ],
)
def test_bad_input_is_a_400_that_names_it_and_writes_nothing(ddb, client, acme, field, value):
    sign_in(client, "supervisor", username="funds-bad")
    before = list(Fund.objects.values_list("code", "currency", "max_amount"))
    events = len(audit_events(ddb))
    form = {"tenant": "acme", "code": "CAPITAL", "currency": "EUR", "max_amount": "100"}
    answer = client.post("/funds/set/", {**form, field: value})
    assert answer.status_code == 400
    assert 'role="alert"' in answer.content.decode()
    assert list(Fund.objects.values_list("code", "currency", "max_amount")) == before
    assert len(audit_events(ddb)) == events

"""Money at intake: only a tenant's registered funds, up to each fund's
largest single amount, with the currency's ISO 4217 minor units."""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command

from dashboard.tenancy.models import ApiToken, Fund, Tenant
from reconciliation import clock
from reconciliation.claims.request import parse_fields
from tests.conftest import ApiCaller, pledge_body
from tests.helpers import audit_events, claims, ledger_total, nothing_written, pledges


def _register(tenant: str, code: str, currency: str, max_amount: str) -> None:
    call_command("add_fund", code, tenant=tenant, currency=currency, max_amount=max_amount)


@pytest.mark.parametrize(
    ("key", "change", "error", "fields"),
    [
        pytest.param(
            "typo-1",
            {"fund": "GENERLA"},
            "unknown_fund",
            {"fund": "GENERLA is not a registered fund (registered: GENERAL USD)"},
            id="misspelt-fund",
        ),
        pytest.param(
            "eur-1",
            {"currency": "EUR"},
            "unknown_fund",
            {"fund": "GENERAL is not registered in EUR (registered in USD)"},
            id="fund-in-another-currency",
        ),
        pytest.param(
            "big-1",
            {"amount": "99999999999.00"},
            "amount_over_limit",
            {"amount": "larger than the largest single amount of GENERAL in USD: 1000000.00"},
            id="amount-over-the-limit",
        ),
    ],
)
def test_money_the_tenant_did_not_register_is_400_and_writes_nothing(
    ddb, api, key, change, error, fields
):
    """Refused with its own code, saying what is registered, and nothing written (no
    claim, no pledge, no ledger item, no audit event): a misspelt fund (``GENERLA``)
    names the registered funds; GENERAL, registered in USD only, in EUR names the
    currencies it is registered in; 99,999,999,999.00 USD is over GENERAL's largest
    single amount (1,000,000)."""
    response = api.post(key, pledge_body(**change))
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == error
    assert body["fields"] == fields
    assert nothing_written(ddb)


def test_exactly_the_funds_limit_is_accepted(ddb, api):
    """1,000,000.00 USD, GENERAL's largest single amount, is accepted."""
    assert api.post("big-2", pledge_body(amount="1000000.00")).status_code == 201


def test_a_lowered_limit_applies_to_the_next_request(ddb, api):
    """add_fund on a registered fund changes its limit; intake reads it per request."""
    _register("acme", "GENERAL", "USD", "100")
    assert api.post("lim-1", pledge_body(amount="100.01")).json()["error"] == "amount_over_limit"
    assert api.post("lim-2", pledge_body(amount="100")).status_code == 201


def test_a_rule_that_came_later_never_refuses_a_known_key(ddb, api):
    """A pledge recorded, then its fund's limit lowered below it and the fund removed:
    the client's identical retry still gets its original answer (a replay), never a 400
    saying nothing was recorded; a new key is refused. Also for a key whose answer was
    lost (the claim is there, the client was told 202)."""
    assert api.post("later-1", pledge_body(amount="500.00")).status_code == 201
    _register("acme", "GENERAL", "USD", "100")
    replay = api.post("later-1", pledge_body(amount="500.00"))
    assert replay.status_code == 200 and replay["Idempotent-Replayed"] == "true"
    assert replay.json()["amount"] == "500.00"
    Fund.objects.filter(tenant__name="acme", code="GENERAL").delete()
    again = api.post("later-1", pledge_body(amount="500.00"))
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    # The same key with another body is still the key reused, not a fund refusal.
    reused = api.post("later-1", pledge_body(amount="400.00"))
    assert reused.status_code == 422
    refused = api.post("later-2", pledge_body(amount="500.00"))
    assert refused.status_code == 400 and refused.json()["error"] == "unknown_fund"
    assert len(pledges(ddb)) == 1


def test_intake_reads_the_funds_with_the_token(ddb, api, django_assert_num_queries):
    """The fund check costs no query of its own: the funds come with the token's. (The
    token's ``last_used_at``, written at most once a minute, was written just now.)"""
    ApiToken.objects.filter(tenant="acme").update(last_used_at=clock.now())
    with django_assert_num_queries(1):
        assert api.post("q-1", pledge_body()).status_code == 201


def test_jpy_is_accepted_whole_and_stored_without_decimals(ddb, api):
    """JPY has no minor unit: "1000" is recorded and answered as "1000" (was "1000.00"),
    "1000.5" is refused, and "1000.00" is the same pledge as "1000"."""
    _register("acme", "GENERAL", "JPY", "5000000")
    response = api.post("yen-1", pledge_body(amount="1000", currency="JPY"))
    assert response.status_code == 201
    assert response.json()["amount"] == "1000"
    assert api.get("yen-1").json()["amount"] == "1000"
    [pledge] = pledges(ddb)
    assert pledge["amount"] == Decimal("1000") and pledge["currency"] == "JPY"
    [claim] = claims(ddb)
    assert json.loads(claim["request"])["amount"] == "1000"
    assert ledger_total(ddb, "GENERAL", "JPY") == (Decimal("1000"), 1)
    replay = api.post("yen-1", pledge_body(amount="1000.00", currency="JPY"))
    assert replay.status_code == 200 and replay.json()["amount"] == "1000"

    refused = api.post("yen-2", pledge_body(amount="1000.5", currency="JPY"))
    assert refused.status_code == 400
    assert refused.json()["fields"] == {
        "amount": "JPY has no minor unit: a whole amount is required"
    }
    assert len(pledges(ddb)) == 1


def test_three_place_currency_takes_fils(ddb, api):
    """BHD has three decimal places: "12.345" is recorded as such, "12.5" as "12.500",
    and a fourth place is refused."""
    _register("acme", "GENERAL", "BHD", "10000")
    response = api.post("bhd-1", pledge_body(amount="12.345", currency="BHD"))
    assert response.status_code == 201 and response.json()["amount"] == "12.345"
    assert api.post("bhd-2", pledge_body(amount="12.5", currency="BHD")).json()["amount"] == (
        "12.500"
    )
    refused = api.post("bhd-3", pledge_body(amount="12.3456", currency="BHD"))
    assert refused.status_code == 400
    assert refused.json()["fields"] == {"amount": "BHD takes at most 3 decimal places"}
    assert ledger_total(ddb, "GENERAL", "BHD") == (Decimal("24.845"), 2)


def test_usd_payload_hash_is_unchanged():
    """A USD request hashes exactly as before minor units were per currency, so replays
    of keys claimed before the upgrade still replay (golden value)."""
    request = parse_fields(pledge_body())
    assert request.canonical_json() == (
        '{"amount":"25.00","currency":"USD","donor_ref":"D-1001","fund":"GENERAL"}'
    )
    assert (
        request.payload_hash == "c57a71113761c74386744d2c4bae8809933b16e1cb08c54ee46f4c4346a582f0"
    )


def test_a_jpy_key_claimed_with_two_places_still_replays(ddb, api):
    """A claim written before the upgrade hashed "1000.00" for JPY: the same request
    today ("1000") is recognised as the same payload and replayed, not refused as a
    reused key."""
    _register("acme", "GENERAL", "JPY", "5000000")
    assert api.post("old-yen", pledge_body(amount="1000", currency="JPY")).status_code == 201
    legacy = '{"amount":"1000.00","currency":"JPY","donor_ref":"D-1001","fund":"GENERAL"}'
    legacy_hash = hashlib.sha256(legacy.encode()).hexdigest()
    [claim] = claims(ddb)
    ddb.client.update_item(
        TableName=ddb.tables.idempotency_keys,
        Key={"pk": {"S": claim["pk"]}},
        UpdateExpression="SET payload_hash = :h",
        ExpressionAttributeValues={":h": {"S": legacy_hash}},
    )
    again = api.post("old-yen", pledge_body(amount="1000", currency="JPY"))
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    changed = api.post("old-yen", pledge_body(amount="1001", currency="JPY"))
    assert changed.status_code == 422
    assert len(pledges(ddb)) == 1


# --- the registry -------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_new_tenant_starts_with_default_funds(settings, client):
    """The first token of a tenant creates it with DEFAULT_FUNDS (CODE[:CURRENCY[:MAX]],
    the defaults filling the gaps)."""
    settings.DEFAULT_FUNDS = "GENERAL:USD:500, RELIEF:EUR, BUILDING"
    settings.FUND_DEFAULT_CURRENCY = "GBP"
    settings.FUND_DEFAULT_MAX_AMOUNT = "2500"
    ApiToken.issue("globex")
    funds = {(f.code, f.currency, f.max_amount) for f in Fund.objects.filter(tenant__name="globex")}
    assert funds == {
        ("GENERAL", "USD", Decimal("500")),
        ("RELIEF", "EUR", Decimal("2500")),
        ("BUILDING", "GBP", Decimal("2500")),
    }
    ApiToken.issue("globex")  # a second token changes nothing
    assert Fund.objects.filter(tenant__name="globex").count() == 3


@pytest.mark.engines("moto")
def test_add_fund_registers_and_updates_a_limit(ddb, db):
    """add_fund creates the tenant (with its default funds) and the fund; run again with
    another limit it updates it; without --currency it takes FUND_DEFAULT_CURRENCY. Each
    change is an audit event on TENANT#initech, by the system through the command."""
    out = _output("add_fund", "scholarship", tenant="initech", currency="eur", max_amount="750.5")
    assert (
        out
        == "registered fund SCHOLARSHIP in EUR for tenant initech: largest single amount 750.50\n"
    )
    assert Tenant.objects.get(name="initech").funds.count() == 2  # GENERAL USD + this one
    out = _output("add_fund", "SCHOLARSHIP", tenant="initech", currency="EUR", max_amount="900")
    assert out.startswith("updated fund SCHOLARSHIP in EUR")
    assert Fund.objects.get(tenant__name="initech", code="SCHOLARSHIP").max_amount == 900
    _output("add_fund", "RELIEF", tenant="initech")
    assert Fund.objects.get(tenant__name="initech", code="RELIEF").currency == "USD"
    events = audit_events(ddb, "TENANT#initech")
    assert [e["action"] for e in events] == [
        "tenant_created",
        "fund_registered",
        "fund_limit_changed",
        "fund_registered",
    ]
    assert events[2]["before"]["max_amount"] == "750.50"
    assert events[2]["after"]["max_amount"] == "900.00"
    assert events[0]["actor"]["role"] == "system"


@pytest.mark.engines("moto")
@pytest.mark.parametrize(
    "args,problem",
    [
        (("GEN ERAL",), "fund code"),
        (("GENERAL", "--currency", "XYZ"), "not an ISO 4217"),
        (("GENERAL", "--currency", "JPY", "--max-amount", "10.5"), "JPY takes at most 0"),
        (("GENERAL", "--max-amount", "0"), "greater than 0"),
        (("GENERAL", "--max-amount", "lots"), "not a decimal"),
    ],
)
def test_add_fund_refuses_what_intake_could_not_honour(ddb, db, args, problem):
    """A bad code, currency or limit is refused with the reason; nothing is registered."""
    with pytest.raises(CommandError, match=problem):
        call_command("add_fund", *args, "--tenant", "initech")
    assert not Fund.objects.filter(tenant__name="initech").exclude(code="GENERAL").exists()
    assert [e["action"] for e in audit_events(ddb, "TENANT#initech")] in (
        [],
        ["tenant_created"],
    )


def _output(*args, **kwargs) -> str:
    from io import StringIO

    out = StringIO()
    call_command(*args, stdout=out, **kwargs)
    return out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_migration_gives_every_token_tenant_its_default_funds(settings):
    """Upgrading: 0003 creates a Tenant with DEFAULT_FUNDS for every tenant a token
    names, so the installation's callers keep pledging to GENERAL."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    settings.DEFAULT_FUNDS = "GENERAL:USD:1000,RELIEF:USD:50"
    before = [("dashboard", "0002_tenants_funds_profiles")]
    after = [("dashboard", "0003_tenants_from_tokens")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old_apps = executor.loader.project_state(before).apps
    old_token = old_apps.get_model("dashboard", "ApiToken")
    for tenant, digest in (("acme", "a" * 64), ("acme", "b" * 64), ("globex", "c" * 64)):
        old_token.objects.create(tenant=tenant, token_hash=digest, hint="x")
    executor = MigrationExecutor(connection)
    executor.migrate(after)
    executor.loader.build_graph()
    funds = sorted(Fund.objects.values_list("tenant__name", "code", "currency", "max_amount"))
    assert funds == [
        ("acme", "GENERAL", "USD", Decimal("1000")),
        ("acme", "RELIEF", "USD", Decimal("50")),
        ("globex", "GENERAL", "USD", Decimal("1000")),
        ("globex", "RELIEF", "USD", Decimal("50")),
    ]
    call_command("migrate", verbosity=0)


def test_another_tenants_fund_does_not_count(ddb, api, client):
    """Funds are per tenant: globex's RELIEF does not open RELIEF to acme."""
    _register("globex", "RELIEF", "USD", "100")
    refused = api.post("rel-1", pledge_body(fund="RELIEF"))
    assert refused.json()["error"] == "unknown_fund"
    _, raw = ApiToken.issue("globex")
    other = ApiCaller(client, raw, "globex")
    assert other.post("rel-1", pledge_body(fund="RELIEF")).status_code == 201


@pytest.mark.parametrize(
    "amount,currency,normalised,problem",
    [
        ("25", "USD", "25.00", None),
        ("25.5", "EUR", "25.50", None),
        ("25.001", "USD", None, "USD takes at most 2 decimal places"),
        ("25.000", "USD", "25.00", None),
        ("1000.0", "JPY", "1000", None),
        ("1000", "JPY", "1000", None),
        ("1000.00", "JPY", "1000", None),
        ("1000.5", "JPY", None, "JPY has no minor unit: a whole amount is required"),
        ("0.125", "KWD", "0.125", None),
        ("7", "BHD", "7.000", None),
        # ISO 4217, not the CLDR's usage data: HUF and IDR keep two places, IQD three.
        ("10.5", "HUF", "10.50", None),
        ("10.5", "IDR", "10.50", None),
        ("1.125", "IQD", "1.125", None),
        ("1", "BGN", "1.00", None),  # withdrawn, still read; refused by the fund check
    ],
)
def test_amounts_follow_the_currencys_minor_units(amount, currency, normalised, problem):
    """Each currency's ISO 4217 minor units: what is accepted, how it is written, and
    why the rest is refused."""
    from reconciliation.claims.request import InvalidRequest

    body = pledge_body(amount=amount, currency=currency)
    if problem is None:
        assert parse_fields(body).normalised()["amount"] == normalised
    else:
        with pytest.raises(InvalidRequest) as info:
            parse_fields(body)
        assert info.value.fields == {"amount": problem}


def test_accepted_currencies_are_iso_4217s_current_list():
    """The accepted codes follow ISO's current list: funds and units of account are not
    currencies a donor pays in, and withdrawn codes are gone."""
    from reconciliation.currencies import ISO_4217, minor_units

    assert {"USD", "EUR", "JPY", "XCG", "ZWG"} <= ISO_4217
    assert not {"BGN", "ANG", "ZWL", "CHE", "USN", "CLF", "XAD", "XAU", "XXX"} & ISO_4217
    assert (minor_units("USD"), minor_units("JPY"), minor_units("KWD")) == (2, 0, 3)


def test_a_withdrawn_currency_is_refused_for_new_pledges_and_still_read(ddb, api):
    """BGN (withdrawn when Bulgaria adopted the euro) was accepted before: a pledge
    recorded in it still reads back, and its amount is written with its two places;
    a new pledge in it is refused, saying why, and writes nothing."""
    from decimal import Decimal as D

    from reconciliation.currencies import amount_text, minor_units

    assert minor_units("BGN") == 2 and amount_text(D("5"), "BGN") == "5.00"
    assert minor_units("XYZ") == 2  # any stored code stays readable
    refused = api.post("bgn-1", pledge_body(currency="BGN"))
    assert refused.status_code == 400
    assert "withdrawn from ISO 4217" in refused.json()["fields"]["currency"]
    assert nothing_written(ddb)


@pytest.mark.engines("moto")  # parsing and normalising: no engine semantics
@pytest.mark.parametrize(
    "key,amount,currency,answered",
    [
        ("z-usd-1", "25.000", "USD", "25.00"),
        ("z-usd-2", "25.1", "USD", "25.10"),
        ("z-jpy-1", "1000.0", "JPY", "1000"),
        ("z-bhd-1", "12.50000", "BHD", "12.500"),
    ],
)
def test_zeros_beyond_the_minor_units_are_accepted_and_normalised(
    ddb, api, key, amount, currency, answered
):
    """One rule for trailing zeros: zeros past the currency's minor units change nothing,
    so "25.000" USD is recorded as "25.00" like "25.1" as "25.10". The same amount must not
    be accepted or refused by how many zeros the client happened to write."""
    if currency != "USD":
        _register("acme", "GENERAL", currency, "5000000")
    response = api.post(key, pledge_body(amount=amount, currency=currency))
    assert response.status_code == 201, response.json()
    assert response.json()["amount"] == answered
    [pledge] = pledges(ddb)
    assert pledge["amount"] == Decimal(answered)


@pytest.mark.engines("moto")
@pytest.mark.parametrize(
    "amount,currency,problem",
    [
        ("25.001", "USD", "USD takes at most 2 decimal places"),
        ("25.0010", "USD", "USD takes at most 2 decimal places"),
        ("1000.5", "JPY", "JPY has no minor unit: a whole amount is required"),
        ("1000.50", "JPY", "JPY has no minor unit: a whole amount is required"),
    ],
)
def test_a_nonzero_digit_beyond_the_minor_units_is_refused(ddb, api, amount, currency, problem):
    """A non-zero digit past the currency's minor units is refused with a 400 naming the
    rule, and nothing is written."""
    if currency != "USD":
        _register("acme", "GENERAL", currency, "5000000")
    response = api.post("z-refused", pledge_body(amount=amount, currency=currency))
    assert response.status_code == 400
    assert response.json()["fields"] == {"amount": problem}
    assert pledges(ddb) == [] and claims(ddb) == []

"""One configuration for every process (reconciliation/ops/config.py):
``ddb_setup`` records the fingerprint in every region; a process whose configuration
differs gets a system-check error naming the fields, ``/healthz`` says so, and the
worker and beat refuse to start; ``--accept-config`` is the deliberate, audited step."""

from __future__ import annotations

import io

import pytest
from celery import signals
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from dashboard.celery import refuse_a_differing_configuration
from reconciliation.apps import configuration_check
from reconciliation.audit.repository import AuditRepository
from reconciliation.dynamo.client import reset_clients
from reconciliation.dynamo.local import free_port
from reconciliation.ops.config import (
    ConfigRepository,
    ConfigurationDiffers,
    config_fingerprint,
    config_refuse_start,
)
from reconciliation.stores import every_store
from tests.helpers import AS_SYSTEM

pytestmark = pytest.mark.django_db(databases=[])


def setup(*args: str) -> str:
    out = io.StringIO()
    call_command("ddb_setup", *args, stdout=out)
    return out.getvalue()


def ids(messages) -> list[str]:
    return [m.id for m in messages]


def test_ddb_setup_records_the_configuration_once_in_every_region(two_regions):
    """One item per region, in that region's cases table, with this configuration's
    digest; the next run finds it as recorded and the check has nothing to say."""
    assert ids(configuration_check()) == ["reconciliation.W004", "reconciliation.W004"]
    text = setup()
    assert "us-east-1: configuration recorded" in text
    assert "eu-west-1: configuration recorded" in text
    digest = config_fingerprint().digest
    for store in every_store():
        recorded = ConfigRepository(store).get()
        assert recorded is not None and recorded.digest == digest
        assert recorded.config["regions"] == ["eu-west-1", "us-east-1"]
        assert recorded.config["primary_region"] == "us-east-1"
    assert "configuration as recorded" in setup()
    assert configuration_check() == []


def test_listing_the_regions_in_another_order_is_the_same_configuration(two_regions, settings):
    setup()
    reversed_listing = ",".join(reversed(settings.DDB_REGIONS.split(",")))
    with override_settings(DDB_REGIONS=reversed_listing):
        reset_clients()
        assert configuration_check() == []
    reset_clients()


def test_a_process_with_another_configuration_is_refused_naming_the_fields(two_regions, client):
    """Another primary region and other ledger shards: a check error per region naming
    both fields, /healthz 503 with the fields, the worker and beat refuse to start, and
    ddb_setup refuses and changes nothing."""
    setup()
    with override_settings(DDB_PRIMARY_REGION="eu-west-1", LEDGER_SHARDS=4):
        reset_clients()
        errors = configuration_check()
        assert ids(errors) == ["reconciliation.E004", "reconciliation.E004"]
        assert {e.msg for e in errors} == {
            f"configuration differs from the one recorded in {r}: ledger_shards, primary_region"
            for r in ("us-east-1", "eu-west-1")
        }
        response = client.get("/healthz")
        assert response.status_code == 503
        assert response.json()["config"] == "differs (ledger_shards, primary_region)"
        with pytest.raises(SystemExit, match="ledger_shards, primary_region"):
            refuse_a_differing_configuration()
        # Celery logs and swallows an Exception from a signal handler; SystemExit is not
        # one, so sending the real signal stops beat (and the worker: same handler).
        with pytest.raises(SystemExit, match="refusing to start"):
            signals.beat_init.send(sender=None)
        assert refuse_a_differing_configuration in signals.worker_init._live_receivers(None)
        with pytest.raises(ConfigurationDiffers):
            config_refuse_start()  # what wsgi.py and asgi.py call
        with pytest.raises(CommandError, match="ledger_shards, primary_region") as refused:
            setup()
        assert "--accept-config" in str(refused.value)
    reset_clients()
    assert configuration_check() == []  # nothing was changed
    refuse_a_differing_configuration()  # the recorded configuration starts


def test_accept_config_overwrites_every_region_and_audits_it(two_regions):
    setup()
    old = config_fingerprint().digest
    with override_settings(STUCK_GRACE_S=45):
        reset_clients()
        new = config_fingerprint().digest
        text = setup("--accept-config")
        assert "us-east-1: configuration accepted" in text
        assert "eu-west-1: configuration accepted" in text
        assert configuration_check() == []
        for store in every_store():
            assert ConfigRepository(store).get().digest == new
        head = AuditRepository(AS_SYSTEM.store).head("SYSTEM")
        event = AuditRepository(AS_SYSTEM.store).event_at("SYSTEM", head.seq)
        assert event["action"] == "config_accepted"
        assert event["detail"]["fields"] == ["stuck_grace_s"]
        assert event["detail"]["digest_before"] == {"us-east-1": old, "eu-west-1": old}
        assert event["detail"]["digest_after"] == new
        assert event["actor"]["role"] == "system"
        assert "configuration as recorded" in setup("--accept-config")  # nothing to accept
    reset_clients()
    assert ids(configuration_check()) == ["reconciliation.E004", "reconciliation.E004"]


@pytest.mark.engines("moto")
def test_healthz_says_not_recorded_on_a_fresh_table_and_ok_once_recorded(ddb, client):
    """A fresh table (every test's) has no record: a warning and a healthz line, never a
    refusal; after ddb_setup the line is ok."""
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json()["config"] == "not recorded"
    assert ids(configuration_check()) == ["reconciliation.W004"]
    refuse_a_differing_configuration()
    setup()
    assert client.get("/healthz").json()["config"] == "ok"


def test_an_unreachable_engine_is_a_warning_not_an_error(settings):
    settings.DYNAMODB_ENDPOINT_URL = f"http://127.0.0.1:{free_port()}"
    settings.DDB_REGIONS = ""
    settings.DDB_PRIMARY_REGION = ""
    reset_clients()
    try:
        [warning] = configuration_check()
        refuse_a_differing_configuration()
    finally:
        reset_clients()
    assert warning.id == "reconciliation.W005"
    assert "127.0.0.1" not in warning.msg

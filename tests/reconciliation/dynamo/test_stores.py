"""Stores: what the edge resolves and passes down. A batch command's store waits longer
than the request path's; a key's home store and every region's store come from
``DDB_REGIONS``."""

from __future__ import annotations

import pytest

from reconciliation.dynamo.client import batch_patience, home_region, reset_clients
from reconciliation.stores import every_store, first_store, home_store


@pytest.fixture
def fresh_clients():
    reset_clients()
    yield
    reset_clients()


def test_a_batch_commands_store_is_patient_and_the_request_paths_is_not(settings, fresh_clients):
    """``first_store(wait=batch_patience())`` (export_audit, verify_audit) reads with the batch
    timeout and attempts; every other store keeps the request path's, in one process."""
    settings.DDB_READ_TIMEOUT_S, settings.DDB_MAX_ATTEMPTS = 2.0, 2
    settings.DDB_BATCH_READ_TIMEOUT_S, settings.DDB_BATCH_MAX_ATTEMPTS = 20.0, 5
    batch = first_store(wait=batch_patience()).client.meta.config
    request = first_store().client.meta.config
    assert (batch.read_timeout, batch.retries["total_max_attempts"]) == (20.0, 5)
    assert (request.read_timeout, request.retries["total_max_attempts"]) == (2.0, 2)


def test_home_and_every_store_follow_the_configured_regions(settings, fresh_clients):
    settings.DDB_REGIONS = "us-east-1=http://127.0.0.1:1,eu-west-1=http://127.0.0.1:2"
    settings.DDB_PRIMARY_REGION = "us-east-1"
    stores = every_store()
    assert [s.client.meta.region_name for s in stores] == ["us-east-1", "eu-west-1"]
    for key in ("acme#create_pledge#a", "acme#create_pledge#b", "acme#create_pledge#c"):
        assert home_store(key).client.meta.region_name == home_region(key).name
    assert first_store().client.meta.region_name == "us-east-1"

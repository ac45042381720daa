"""A real ``webhook_sink`` process on loopback, and an endpoint registered for it; keys
whose pledges share an ``acks_due`` shard."""

from __future__ import annotations

import io
import json
import os
import sys
import urllib.request
from collections.abc import Callable, Iterator

import pytest
from django.core.management import call_command

from reconciliation.dynamo.local import free_port
from reconciliation.dynamo.tables import ack_shard
from tests.processes import ROOT, Process, wait_for


def same_shard_keys(count: int, prefix: str = "c") -> list[str]:
    """``count`` idempotency keys of the tenant ``acme`` whose pledges share one
    ``acks_due`` shard (one shard lease covers them)."""
    keys = [f"{prefix}-{n}" for n in range(200)]
    shard = ack_shard(f"acme#{keys[0]}")
    return [k for k in keys if ack_shard(f"acme#{k}") == shard][:count]


class Sink:
    def __init__(self, process: Process, port: int, secret: str):
        self.process, self.port, self.secret = process, port, secret

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks"

    def stats(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=5) as answer:
            return json.loads(answer.read())

    def up(self) -> bool:
        try:
            self.stats()
        except OSError:
            return False
        return True


@pytest.fixture
def acme_sink(tmp_path, settings) -> Iterator[Callable[..., Sink]]:
    """Start a sink on a free loopback port, registered for the tenant ``acme`` with
    ``add_webhook``; the sink verifies with the secret the command printed."""
    settings.WEBHOOK_ALLOW_LOOPBACK = True
    started: list[Sink] = []

    def start(*flags: str) -> Sink:
        port = free_port()
        out = io.StringIO()
        call_command(
            "add_webhook", "--tenant", "acme", f"http://127.0.0.1:{port}/hooks", stdout=out
        )
        secret = out.getvalue().strip().splitlines()[-1]
        args = [sys.executable, "manage.py", "webhook_sink", "--port", str(port)]
        args += ["--secret", secret, *flags]
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "dashboard.settings_test"}
        process = Process(args, env=env, log_path=tmp_path / f"sink-{port}.log", cwd=ROOT)
        sink = Sink(process.start(), port, secret)
        started.append(sink)
        wait_for(sink.up, timeout=30, what=f"webhook_sink on {port}")
        return sink

    yield start
    for sink in started:
        sink.process.stop()

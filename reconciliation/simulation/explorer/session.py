"""A worker's session: its own tables, settings and API token, the simulated waits, and
running one scenario from a clean slate to its :class:`Result`.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from unittest import mock
from urllib.parse import quote

import botocore.endpoint
from botocore.retries.quota import RetryQuota
from django.apps import apps
from django.conf import settings
from django.test import Client
from django.test.utils import override_settings

from reconciliation.cases.vocabulary import CaseState
from reconciliation.casework.tasks import retry_commit_task
from reconciliation.claims.models import OPERATION_CREATE_PLEDGE, claim_pk, pending_shard
from reconciliation.claims.outcomes import OUTCOME_KINDS
from reconciliation.claims.request_log_buffer import RequestLogBuffer, request_log_buffered
from reconciliation.dynamo.batch import batch_writer
from reconciliation.dynamo.client import (
    TableNames,
    build_client,
    dynamodb_client,
    regions,
    reset_clients,
)
from reconciliation.dynamo.items import from_item
from reconciliation.dynamo.local import start_dynamodb_local
from reconciliation.dynamo.tables import drop_tables, ensure_tables
from reconciliation.simulation import faults
from reconciliation.simulation.explorer.life import Life
from reconciliation.simulation.explorer.vocabulary import (
    BODY,
    OWN_SHARD,
    TENANT,
    Fault,
    scenario_id,
    scenario_parse,
)
from reconciliation.simulation.explorer.wire import CallRecord, Wire
from reconciliation.simulation.invariants import (
    KEY_ATTRIBUTES,
    VIEW_ERRORS,
    Answer,
    Problem,
    Snapshot,
    check_at_rest,
)

if TYPE_CHECKING:
    from django.test.client import _MonkeyPatchedWSGIResponse as TestResponse


@dataclass
class Result:
    scenario: str
    calls: list[CallRecord] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    unfired: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def plan(self) -> tuple[Fault, ...]:
        return scenario_parse(self.scenario)


def scenario_key(sid: str, seed: int) -> str:
    """The scenario's own idempotency key: fresh for each scenario, the same on every
    replay, and always in OWN_SHARD, so the sweep's calls come in one order."""
    base = hashlib.sha256(f"{seed}:{sid}".encode()).hexdigest()[:16]
    for salt in itertools.count():
        key = f"xf-{base}-{salt}"
        if pending_shard(claim_pk(TENANT, OPERATION_CREATE_PLEDGE, key)) == OWN_SHARD:
            return key
    raise AssertionError("unreachable")


class _SleeplessTime:
    """``time`` as botocore's endpoint sees it, minus the sleeping between retries."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def sleep(_seconds: float) -> None:
        return None


def _quota_always(_self: RetryQuota, _capacity_amount: int) -> bool:
    return True


@contextlib.contextmanager
def simulated_waits() -> Iterator[None]:
    """No real waiting: botocore's retry sleeps are skipped, and its retry quota (a
    client-wide circuit breaker that no single intent drains) stays full, so no scenario
    depends on the ones that ran before it."""
    with (
        mock.patch.object(botocore.endpoint, "time", _SleeplessTime()),
        mock.patch.object(RetryQuota, "acquire", _quota_always),
    ):
        yield


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """Injected failures make the system log loudly by design; the matrix says it all."""
    before = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(before)


def _documented_errors() -> frozenset[str]:
    """Outcome kinds the intake view maps to HTTP (its STATUS map covers exactly
    ``OUTCOME_KINDS``, tests/dashboard/test_api_status.py), plus its own field and auth
    errors."""
    return OUTCOME_KINDS | VIEW_ERRORS


class Session:
    """One worker's tables, API token and hooks; it runs scenarios one after another and
    resets between them whatever a scenario could leak into the next: the tables are
    emptied, the clock unwound, the wire's plan and counters replaced."""

    def __init__(self, *, endpoint_url: str, prefix: str, seed: int = 0):
        self.endpoint_url = endpoint_url
        self.names = TableNames.from_prefix(prefix)
        self.seed = seed
        self.dispatched: list[str] = []
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Session:
        try:
            self._open(self._stack)
        except BaseException:
            self._stack.close()  # nothing of a half-opened session outlives it
            raise
        return self

    def _open(self, stack: contextlib.ExitStack) -> None:
        stack.enter_context(override_settings(**self._settings()))
        stack.callback(reset_clients)
        stack.enter_context(quiet_logs())
        stack.enter_context(simulated_waits())
        # The intake request log's buffered entries are written by no thread here: every
        # call the wire sees must be the life's own, in its order. They are dropped after
        # each scenario (a buffered entry is written after its answer was sent, so no
        # fault of its write could change an answer; the commit's own entry is one of the
        # commit's items, explored with it).
        self.request_log = stack.enter_context(
            request_log_buffered(RequestLogBuffer(capacity=1_000, interval_s=0))
        )
        # The retry task runs in the life's own retry episodes, never through a broker.
        stack.enter_context(mock.patch.object(retry_commit_task, "apply_async", self._dispatch))
        faults.set_plan(None)
        reset_clients()
        self.oracle = build_client(regions()[0])  # unhooked: for checks and cleaning
        ensure_tables(self.oracle, self.names)
        stack.callback(drop_tables, self.oracle, self.names)
        self.wire = Wire(self.names)
        dynamodb_client().meta.events.register_first("before-send.dynamodb", self.wire)
        self.http, self.token = self._api_client(stack)
        self.documented = _documented_errors()

    def __exit__(self, *exc_info: object) -> None:
        self._stack.close()

    def _settings(self) -> dict[str, Any]:
        return {
            "DYNAMODB_ENDPOINT_URL": self.endpoint_url,
            "DDB_TABLE_PREFIX": self.names.idempotency_keys.removesuffix("idempotency_keys"),
            "DDB_REGIONS": "",
            "FAULT_INJECTION": "",
            # Every application retry is still made, at once (full jitter of zero).
            "DDB_APP_RETRY_BASE_S": 0,
        }

    @staticmethod
    def _api_client(stack: contextlib.ExitStack) -> tuple[Client, str]:
        # The explorer is a client of the HTTP edge and needs a bearer token; the token
        # model is the edge's, reached through the app registry: reconciliation never
        # imports dashboard (docs/design.md §2).
        api_token = apps.get_model("tenancy", "ApiToken")
        token, raw = api_token.issue(TENANT)
        stack.callback(token.delete)
        hosts = [h for h in settings.ALLOWED_HOSTS if h != "*" and not h.startswith(".")]
        return Client(HTTP_HOST=(hosts or ["localhost"])[0]), raw

    def _dispatch(
        self,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        **_options: Any,
    ) -> None:
        self.dispatched.append((args or [None])[0])

    def http_call(self, method: str, key: str, request_id: str = "") -> TestResponse:
        headers = {"Authorization": f"Bearer {self.token}"}
        if request_id:
            # The claim records it as its correlation id: the oracle can tell whose it is.
            headers["X-Request-Id"] = request_id
        if method == "POST":
            headers["Idempotency-Key"] = key
            return self.http.post(
                "/api/v1/pledges",
                data=json.dumps(BODY),
                content_type="application/json",
                headers=headers,
                secure=True,
            )
        return self.http.get(f"/api/v1/pledges/{quote(key, safe='')}", headers=headers, secure=True)

    def pledge_exists(self, intent_id: str) -> bool:
        item = self.oracle.get_item(
            TableName=self.names.pledges,
            Key={"intent_id": {"S": intent_id}},
            ConsistentRead=True,
        ).get("Item")
        return item is not None

    def claim(self, key: str) -> dict[str, Any] | None:
        item = self.oracle.get_item(
            TableName=self.names.idempotency_keys,
            Key={"pk": {"S": claim_pk(TENANT, OPERATION_CREATE_PLEDGE, key)}},
            ConsistentRead=True,
        ).get("Item")
        return from_item(item) if item else None

    def case_ids(self, intent_id: str) -> set[str]:
        snapshot = Snapshot.scan(self.oracle, self.names, roles=("cases",))
        return {c["case_id"] for c in snapshot.cases() if c["intent_id"] == intent_id}

    def open_cases(self, intent_id: str) -> list[dict[str, Any]]:
        """What a person finds on the queue pages for this intent, oldest id first."""
        snapshot = Snapshot.scan(self.oracle, self.names, roles=("cases",))
        return sorted(
            (
                c
                for c in snapshot.cases()
                if c["intent_id"] == intent_id and c["state"] != CaseState.RESOLVED
            ),
            key=lambda c: c["case_id"],
        )

    def run(self, plan: tuple[Fault, ...]) -> Result:
        sid = scenario_id(plan)
        started = time.monotonic()
        self.wire.start(plan)
        self.dispatched.clear()
        life = Life(self, scenario_key(sid, self.seed))
        try:
            life.live()
        finally:
            self.request_log.discard()
            snapshot = Snapshot.scan(self.oracle, self.names)
            self._empty(snapshot)
        problems = life.problems + check_at_rest(
            snapshot,
            intent_id=life.intent_id,
            answers=life.answers,
            case_opens=[c.case_open for c in self.wire.calls if c.case_open],
            unfenced=[(c.point, text) for c in self.wire.calls for text in c.unfenced],
            documented=self.documented,
        )
        return Result(
            sid,
            calls=list(self.wire.calls),
            answers=life.answers,
            problems=problems,
            unfired=[str(f) for f in plan if str(f.point) not in self.wire.fired],
            seconds=time.monotonic() - started,
        )

    def _empty(self, snapshot: Snapshot) -> None:
        for role, attributes in KEY_ATTRIBUTES.items():
            keys = [{a: item[a] for a in attributes} for item in snapshot.raw.get(role, [])]
            table = getattr(self.names, role)
            with batch_writer(self.oracle, table) as writer:
                for key in keys:
                    writer.delete_item(Key=key)


def run_guarded(session: Session, sid: str) -> Result:
    """A scenario the explorer itself could not run is reported, never silently dropped."""
    try:
        return session.run(scenario_parse(sid))
    except (Exception, faults.SimulatedCrash) as exc:
        detail = f"the explorer could not run it: {type(exc).__name__}: {exc}"[:300]
        return Result(sid, problems=[Problem("explorer", detail)])


@contextlib.contextmanager
def explorer_engine(endpoint_url: str | None) -> Iterator[str]:
    """The configured DynamoDB Local, or one of our own for the run."""
    if endpoint_url:
        yield endpoint_url
        return
    engine = start_dynamodb_local()
    try:
        yield engine.endpoint_url
    finally:
        engine.stop()

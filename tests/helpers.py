"""Helpers shared by the tests: readers of whole tables (tests may Scan; no request path
does), who acts on the tables, staff users and their sign-in, and the audit trail's
seeding and verification."""

from __future__ import annotations

import io
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal
from functools import cached_property
from html import unescape
from typing import TYPE_CHECKING, Any

from reconciliation.actors import system_actor
from reconciliation.audit.repository import AuditRepository
from reconciliation.cases.repository import CaseRepository
from reconciliation.claims.ledger import LedgerRepository
from reconciliation.claims.pledges import PledgeRepository
from reconciliation.claims.repository import ClaimRepository
from reconciliation.dynamo.items import from_item
from reconciliation.stores import Store, first_store, home_store

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.test import Client

    from reconciliation.actors import Actor
    from reconciliation.cases.actions import StaffAction
    from reconciliation.cases.models import Case


class _Current:
    """The version of the case handed to :meth:`Acting.on`: what the person saw."""


CURRENT = _Current()


@dataclass(frozen=True)
class Acting:
    """Someone acting on the first region's tables, as a test's service calls name them:
    ``store=ada.store``, ``actor=ada.actor``, and for a case service ``**ada.on(case,
    **WHY)``. The store is looked up at each use, from the test's settings (its own
    tables), so an ``Acting`` can be made once, at import time."""

    actor: Actor

    @property
    def store(self) -> Store:
        return first_store()

    def staff(self, seen_version: int | None = None, **grounds: Any) -> StaffAction:
        """The person's :class:`StaffAction` with ``grounds`` (reason, action id)."""
        from reconciliation.cases.actions import StaffAction

        return StaffAction(actor=self.actor, seen_version=seen_version, **grounds)

    def on(
        self, case: Case, *, seen_version: int | None | _Current = CURRENT, **grounds: Any
    ) -> dict[str, Any]:
        """A case service's ``case_id``, ``staff`` and ``store`` for acting on ``case``
        as seen at its version (or at ``seen_version``; ``None``: whatever is current)."""
        version = case.version if isinstance(seen_version, _Current) else seen_version
        return {
            "case_id": case.case_id,
            "staff": self.staff(version, **grounds),
            "store": self.store,
        }

    def on_id(
        self, case_id: str, *, seen_version: int | None = None, **grounds: Any
    ) -> dict[str, Any]:
        """The same for the case ``case_id`` in the region it lives in, by its id (with
        several regions, not necessarily the first)."""
        from reconciliation.stores import case_store

        return {
            "case_id": case_id,
            "staff": self.staff(seen_version, **grounds),
            "store": case_store(case_id),
        }


def acting(username: str = "ada", role: str = "finance_staff") -> Acting:
    """``username`` in ``role`` acting on the first region's tables."""
    from tests.conftest import staff_actor

    return Acting(staff_actor(username, role))


AS_SYSTEM = Acting(system_actor())
"""The system itself (a sweep, a task, a command) on the first region's tables: what a
test that acts as nobody in particular passes as ``store=AS_SYSTEM.store``."""


class Repos(Store):
    """A store with its five repositories, for tests that arrange and inspect tables;
    it is a :class:`Store`, so it can be passed wherever the code takes one."""

    @cached_property
    def claims(self) -> ClaimRepository:
        return ClaimRepository(self)

    @cached_property
    def pledges(self) -> PledgeRepository:
        return PledgeRepository(self)

    @cached_property
    def ledger(self) -> LedgerRepository:
        return LedgerRepository(self)

    @cached_property
    def cases(self) -> CaseRepository:
        return CaseRepository(self)

    @cached_property
    def audit(self) -> AuditRepository:
        return AuditRepository(self)


def repositories(client=None) -> Repos:
    """The first region's store with its repositories (on ``client`` if given)."""
    store = first_store(client)
    return Repos(store.client, store.tables)


def repositories_for_key(key: str) -> Repos:
    store = home_store(key)
    return Repos(store.client, store.tables)


def raw_items(ddb, table: str) -> list[dict]:
    """Every item of ``table`` as DynamoDB holds it (attribute values typed), by a
    consistent Scan."""
    items: list[dict] = []
    kwargs = {"TableName": table, "ConsistentRead": True}
    while True:
        response = ddb.client.scan(**kwargs)
        items.extend(response.get("Items", []))
        if "LastEvaluatedKey" not in response:
            return items
        kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]


def scan_all(ddb, table: str) -> list[dict]:
    return [from_item(i) for i in raw_items(ddb, table)]


@dataclass(frozen=True)
class TablesSnapshot:
    """Every item of an engine's tables, to put into another empty set of them: a world
    that a module's tests share is built once per engine and copied into each test's
    tables, a few batch writes instead of seconds of building it again."""

    items: tuple[tuple[dict, ...], ...]  # per table, in the order of ``tables.all()``

    @classmethod
    def take(cls, ddb) -> TablesSnapshot:
        return cls(tuple(tuple(raw_items(ddb, t)) for t in ddb.tables.all()))

    def restore(self, ddb) -> None:
        for table, items in zip(ddb.tables.all(), self.items, strict=True):
            for start in range(0, len(items), 25):
                puts = [{"PutRequest": {"Item": i}} for i in items[start : start + 25]]
                writes: Any = {table: puts}
                while writes:
                    writes = ddb.client.batch_write_item(RequestItems=writes).get(
                        "UnprocessedItems"
                    )


def pledges(ddb) -> list[dict]:
    return scan_all(ddb, ddb.tables.pledges)


def claims(ddb) -> list[dict]:
    return scan_all(ddb, ddb.tables.idempotency_keys)


def cases(ddb) -> list[dict]:
    return [c for c in scan_all(ddb, ddb.tables.cases) if not c["case_id"].startswith("#")]


def audit_events(ddb, stream_prefix: str = "") -> list[dict]:
    return sorted(
        (
            e
            for e in scan_all(ddb, ddb.tables.audit_events)
            if e["stream"].startswith(stream_prefix)
        ),
        key=lambda e: (e["stream"], e["seq"]),
    )


def ledger_total(ddb, fund: str = "GENERAL", currency: str = "USD") -> tuple[Decimal, int]:
    total, count = Decimal("0"), 0
    for item in scan_all(ddb, ddb.tables.ledger):
        if item.get("fund_code") == fund and item.get("currency") == currency:
            total += Decimal(str(item.get("pledged_total", 0)))
            count += int(item.get("pledge_count", 0))
    return total, count


def nothing_written(ddb) -> bool:
    return not (
        pledges(ddb)
        or claims(ddb)
        or scan_all(ddb, ddb.tables.ledger)
        or audit_events(ddb)
        or cases(ddb)
    )


def staff_user(
    username: str,
    role: str | None = "finance_staff",
    *,
    password: str | None = None,
    email: str | None = None,
) -> User:
    """A Django user in ``role``'s group (``None``: in no group); without ``password`` it
    has none usable (tests that only ``force_login`` need none)."""
    from django.contrib.auth.models import Group, User

    user = User.objects.create_user(username, email or f"{username}@example.org", password)
    if role:
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user


def sign_in(
    client,
    role: str | None = "finance_staff",
    username: str | None = None,
    *,
    password: str | None = None,
):
    """A user in ``role``'s group (``None``: in no group), signed in on ``client``."""
    user = staff_user(username or role or "nobody", role, password=password)
    client.force_login(user)
    if role in ("supervisor", "auditor"):
        pass_second_factor(client, user)
    return user


def client_as(role: str | None = "finance_staff", username: str | None = None) -> Client:
    """A browser of its own signed in as a user in ``role``'s group (named ``username``,
    default the role), past its second factor: several people at once in one test."""
    from django.test import Client

    client = Client()
    sign_in(client, role, username)
    return client


def form_signed_in(
    username: str,
    password: str,
    *,
    address: str = "10.1.1.1",
    agent: str | None = None,
    otp_token: str | None = None,
) -> Client:
    """A new browser (``agent``, from ``address``) signed in through the sign-in form,
    which accepted it (a redirect)."""
    from django.test import Client

    client = Client(HTTP_USER_AGENT=agent) if agent else Client()
    answer = sign_in_form(client, username, password, otp_token=otp_token, address=address)
    assert answer.status_code == 302, answer.status_code
    return client


def overview_get(client, **headers):
    """The overview (``GET /``) with its summary as a worker leaves it after everything
    done so far: no view computes the summary itself, a view only asks a worker for it
    (reconciliation/casework/overview.py)."""
    from reconciliation.casework.overview import overview_summary_refresh
    from reconciliation.stores import every_store

    overview_summary_refresh(stores=every_store())
    return client.get("/", **headers)


def pass_second_factor(client, user):
    """Mark ``client``'s session as signed in with an authenticator, as the sign-in form
    does after a good code (the roles that require one reach no page otherwise)."""
    from django_otp import DEVICE_ID_SESSION_KEY
    from django_otp.plugins.otp_totp.models import TOTPDevice

    device = TOTPDevice.objects.filter(user=user, confirmed=True).first()
    device = device or TOTPDevice.objects.create(user=user, name="authenticator")
    session = client.session
    session[DEVICE_ID_SESSION_KEY] = device.persistent_id
    session.save()
    return device


def spend_token(ddb, token: str) -> None:
    """Another transaction under ``token`` (a copied request replayed by hand): DynamoDB
    then refuses any different transaction under it for 10 minutes."""
    ddb.client.transact_write_items(
        TransactItems=[
            {
                "Update": {
                    "TableName": ddb.tables.ledger,
                    "Key": {"fund": {"S": "OTHER#USD#0"}},
                    "UpdateExpression": "ADD pledge_count :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            }
        ],
        ClientRequestToken=token,
    )


@contextmanager
def token_spent_elsewhere(ddb) -> Iterator[str]:
    """Within it every commit goes out under a token another transaction already used
    (:func:`spend_token`): DynamoDB refuses it, a TOKEN_MISMATCH. Yields the token."""
    foreign = str(uuid.uuid4())
    spend_token(ddb, foreign)

    def reuse_token(params, **_kwargs):
        if "ClientRequestToken" in params:
            params["ClientRequestToken"] = foreign

    event = "before-parameter-build.dynamodb.TransactWriteItems"
    ddb.client.meta.events.register(event, reuse_token)
    try:
        yield foreign
    finally:
        ddb.client.meta.events.unregister(event, reuse_token)


def race(*calls: Callable[[], Any]) -> list[Any]:
    """Run every call in its own thread, all released at once by one barrier, and return
    what each returned or raised, in call order: a raised exception comes back as a value,
    so the race test asserts on every outcome (exactly one winner, the rest refused).
    Each thread closes the database connections it opened: on PostgreSQL each is a server
    session, and the test client never closes one (20 rounds of 32 threads left 287 open,
    and the server refused the next)."""
    from django.db import connections

    barrier = threading.Barrier(len(calls))
    outcomes: list[Any] = [None] * len(calls)

    def run(n: int) -> None:
        barrier.wait()
        try:
            outcomes[n] = calls[n]()
        except BaseException as exc:  # handed back to the test, which asserts on it
            outcomes[n] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def sign_in_form(
    client: Client,
    username: str,
    password: str,
    *,
    otp_token: str | None = None,
    address: str = "10.1.1.1",
    forwarded: str | None = None,
):
    """Post the sign-in form as a browser would, from ``address`` (through a proxy that
    says ``forwarded`` when given), with an authenticator code when ``otp_token`` is given."""
    form = {"username": username, "password": password}
    if otp_token is not None:
        form["otp_token"] = otp_token
    extra = {"REMOTE_ADDR": address}
    if forwarded is not None:
        extra["HTTP_X_FORWARDED_FOR"] = forwarded
    return client.post("/accounts/login/", form, **extra)


def audit_seed(
    total: int, *, days: int = 2, start: datetime | None = None, tag: str = ""
) -> list[dict]:
    """``total`` chained synthetic events spread over ``days`` days from ``start``
    (default: midnight ``days`` days ago), bulk-loaded into the audit table."""
    from bench.audit_synthetic import synthetic_events
    from reconciliation import clock

    if start is None:
        start = datetime.combine(clock.now().date() - timedelta(days=days), time.min, tzinfo=UTC)
    events = list(synthetic_events(total, start=start, days=days, tag=tag))
    repositories().audit.batch_put(events)
    return events


def run_verify(*args: str) -> tuple[int, list[str]]:
    """``manage.py verify_audit`` with ``args``: its exit code and the lines it printed."""
    from django.core.management import call_command

    out = io.StringIO()
    try:
        call_command("verify_audit", *args, stdout=out, stderr=io.StringIO())
    except SystemExit as exc:
        return (exc.code if isinstance(exc.code, int) else 1), out.getvalue().splitlines()
    return 0, out.getvalue().splitlines()


def delete_event(ddb, stream: str, seq: int) -> None:
    """Delete one stored audit event (a truncated or gapped chain)."""
    ddb.client.delete_item(
        TableName=ddb.tables.audit_events,
        Key={"stream": {"S": stream}, "seq": {"N": str(seq)}},
    )


_ROW_INTENT = re.compile(
    r'<td[^>]*><a href="/cases/[^"]+/"><span class="intent[^"]*">'
    r'<span class="tenant">([^<]+)</span> <code[^>]*>([^<]+)</code></span></a>'
)


def shown_intents(html: str) -> list[str]:
    """Intent ids (``tenant#key``) of a case table's rows, in order, as the page shows
    them (tenant, then the key in ``<code>``: the ``intent`` filter)."""
    return [f"{unescape(t)}#{unescape(k)}" for t, k in _ROW_INTENT.findall(html)]

"""What a pledge costs in DynamoDB capacity units, per item and per index, on DynamoDB
Local through the real service layer (reconciliation.claims.intake and casework).

    python bench/capacity.py [--write]

Every call the services make is captured (bench/_capture.py): the engine's own
``ConsumedCapacity`` (``INDEXES``) beside the units the documented rules give for the
images of each written item before and after the call
(reconciliation/dynamo/item_size.py). A failed conditional write is reported by no
engine, yet AWS bills it (the existing item's size, at least 1 unit): it is computed.
"""

from __future__ import annotations

import argparse
import contextlib
import uuid
from collections.abc import Iterator
from decimal import Decimal

from _common import machine_line, start_engine, write_section

from reconciliation.cases.actions import StaffAction

TYPICAL = {"donor_ref": "D-1001", "fund": "GENERAL", "amount": "25.00", "currency": "USD"}
# The longest of everything the API accepts (claims/request.py, claims/funds.py,
# dashboard/tenancy/models.py, dashboard/auth.py): tenant 64, Idempotency-Key 255, donor_ref 64,
# fund 32. The amount with the most bytes under MAX_AMOUNT: 3 places in a currency with
# 3 minor units (999999999999.989 is 9 bytes as a number; 999999999999.99 is 8).
LARGEST = {
    "donor_ref": "D" + "9" * 63,
    "fund": "F" * 32,
    "amount": "999999999999.989",
    "currency": "KWD",
}
LARGEST_TENANT = "t" * 64
LARGEST_KEY = "K" * 255
LARGEST_ADDRESS = "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255"
LARGEST_REQUEST_ID = "r" * 64
WHY = {"reason_code": "EVIDENCE_CONFIRMS", "reason_text": "Checked the consistent reads."}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()
    engine = start_engine()
    try:
        report = run(engine.endpoint_url)
    finally:
        engine.stop()
    print(report)
    if args.write:
        write_section("capacity", report)


def run(endpoint_url: str) -> str:
    # After start_engine: these need Django configured.
    from _capture import Recorder
    from _report import render

    from dashboard.celery import app
    from reconciliation.dynamo.client import batch_patience, dynamodb_client, table_names
    from reconciliation.dynamo.tables import table_definitions
    from reconciliation.simulation.fault_stores import FaultStores

    # Tasks (RETRY_COMMIT) run inline, as in tests: their writes are the disposition's.
    app.conf.task_always_eager = app.conf.task_eager_propagates = True
    names = table_names()
    tables = table_definitions(names)
    # The faulty steps' intents go through clients built for injecting faults, as the
    # drill's and the simulator's do; the shared clients carry no fault hook.
    faulty = FaultStores()
    recorder = Recorder(
        [
            dynamodb_client(),
            dynamodb_client(wait=batch_patience()),
            *(store.client for store in faulty.every()),
        ],
        tables,
        endpoint_url,
    )
    steps = Scenarios(recorder, faulty).all()
    return render(steps, tables, names, machine_line())


class Scenarios:
    def __init__(self, recorder, faulty):
        from reconciliation.actors import Actor, Role

        self.r = recorder
        self.faulty = faulty
        self.api = Actor(username="api:acme", role=Role.API, address="203.0.113.7")
        self.steps: list[tuple[str, list]] = []

    @contextlib.contextmanager
    def step(self, label: str) -> Iterator[None]:
        with self.r.step(label) as calls:
            self.steps.append((label, calls))
            yield

    def submit(
        self, key: str, body=TYPICAL, *, tenant: str = "acme", actor=None, faulty: bool = False
    ):
        """Submit ``key``; ``faulty``: on the fault-injecting clients (the step's plan)."""
        from reconciliation.claims.intake import pledge_submit
        from reconciliation.claims.models import OPERATION_CREATE_PLEDGE, claim_pk, pledge_home
        from reconciliation.claims.request import parse_fields

        pk = claim_pk(tenant, OPERATION_CREATE_PLEDGE, key)
        store = self.faulty.home(pk) if faulty else pledge_home(tenant, key)
        return pledge_submit(
            tenant=tenant,
            idempotency_key=key,
            request=parse_fields(dict(body)),
            actor=actor or self.api,
            store=store,
        )

    def all(self) -> list[tuple[str, list]]:
        from reconciliation.actors import Actor, Role
        from reconciliation.claims.funds import Fund, fund_check
        from reconciliation.claims.request import parse_fields, parse_idempotency_key

        # The largest pledge passes the API's own checks.
        assert parse_idempotency_key(LARGEST_KEY) == LARGEST_KEY
        largest = parse_fields(dict(LARGEST))
        fund_check(largest, [Fund(LARGEST["fund"], "KWD", Decimal(LARGEST["amount"]))])
        big_actor = Actor(
            username=f"api:{LARGEST_TENANT}",
            role=Role.API,
            address=LARGEST_ADDRESS,
            correlation_id=LARGEST_REQUEST_ID,
        )
        typical_key = str(uuid.uuid4())
        with self.step("(a) typical pledge: new"):
            assert self.submit(typical_key).kind == "created"
        with self.step("(b) largest pledge: new"):
            outcome = self.submit(LARGEST_KEY, LARGEST, tenant=LARGEST_TENANT, actor=big_actor)
            assert outcome.kind == "created", outcome
        with self.step("(a) typical pledge: replay"):
            assert self.submit(typical_key).kind == "replayed"
        with self.step("(b) largest pledge: replay"):
            outcome = self.submit(LARGEST_KEY, LARGEST, tenant=LARGEST_TENANT, actor=big_actor)
            assert outcome.kind == "replayed"
        self.acknowledgements(f"acme#{typical_key}", f"{LARGEST_TENANT}#{LARGEST_KEY}")
        self.cases()
        return self.steps

    def acknowledgements(self, typical: str, largest: str) -> None:
        """The dispatcher's writes (docs/capacity.md): each step dispatches only the
        pledges it names (``owns``); pledges are submitted outside the steps."""
        from reconciliation.acks.dispatch import acks_dispatch_once
        from reconciliation.acks.models import AttemptResult, Endpoint, secret_new
        from reconciliation.acks.shard_lease import ShardLeases
        from reconciliation.claims.pledges import PledgeRepository
        from reconciliation.dynamo.tables import ack_shard
        from reconciliation.stores import first_store

        store = first_store()
        endpoints = {
            tenant: [Endpoint("E1", tenant, "https://crm.example.org/hooks", secret_new())]
            for tenant in ("acme", LARGEST_TENANT)
        }

        def dispatch(leases, intents: list[str], answer: int = 200):
            report = acks_dispatch_once(
                store,
                endpoints_for=lambda tenant: endpoints[tenant],
                resolve=lambda host, port: ["93.184.216.34"],  # stubbed: nothing leaves
                sender=lambda target, **kwargs: AttemptResult(answer),
                owns=lambda intent_id: intent_id in intents,
                leases=leases,
                workers=0,  # in this thread: capacity is measured per thread
            )
            assert report.leased == len(intents) and not report.errors, report
            return report

        def keys_in(shard: str, count: int, prefix: str) -> list[str]:
            found = (f"{prefix}-{n}" for n in range(10_000))
            keys = [k for k in found if ack_shard(f"acme#{k}") == shard][:count]
            for key in keys:
                assert self.submit(key).kind == "created"
            return [f"acme#{k}" for k in keys]

        held_shard = ack_shard(typical)
        leases = ShardLeases(store, owner="bench-a")
        with self.step("acknowledgement (a): first pass, shard lease taken, delivered"):
            assert dispatch(leases, [typical]).settled == 1
        [second] = keys_in(held_shard, 1, "ack-held")
        with self.step("acknowledgement (a): shard lease held, delivered"):
            assert dispatch(leases, [second]).settled == 1
        [failing] = keys_in(held_shard, 1, "ack-fail")
        with self.step("acknowledgement (a): shard lease held, attempt failed (retry due)"):
            assert dispatch(leases, [failing], answer=500).failed == 1
        leases.hold(ack_shard(largest))
        with self.step("acknowledgement (b) largest pledge: shard lease held, delivered"):
            assert dispatch(leases, [largest]).settled == 1
        pledge = PledgeRepository(store).get(second)
        assert pledge is not None
        # A void (the VOID_PLEDGE approval's part on the pledge: in its transaction, it
        # puts the pledge back in acks_due) makes pledge.voided due.
        store.client.transact_write_items(
            TransactItems=[
                PledgeRepository(store).void_item(  # type: ignore[list-item]
                    pledge, voided_at=pledge.created_at, audit_head="0" * 64
                )
            ]
        )
        with self.step("acknowledgement (a): pledge.voided, shard lease held, delivered"):
            assert dispatch(leases, [second]).settled == 1
        other = next(f"A#{n}" for n in range(8) if f"A#{n}" not in leases.held)
        ten = keys_in(other, 10, "ack-ten")
        with self.step("acknowledgement: 10 pledges of one shard in one pass, lease taken"):
            assert dispatch(ShardLeases(store, owner="bench-b"), ten).settled == 10
        with self.step(
            f"acknowledgement: a dispatcher stops, {len(leases.held)} shard leases released"
        ):
            leases.release()

    def cases(self) -> None:
        from reconciliation import clock
        from reconciliation.casework.sweeps import sweep_stuck_claims
        from reconciliation.simulation import faults
        from reconciliation.stores import every_store, home_store

        injected = self.faulty.injected

        opened = []
        for n, key in enumerate(("stuck-1", "stuck-2")):
            with (
                self.step(f"claim left PENDING by a crash ({key})"),
                clock.travel(-200),  # the worker died 200 s ago: lease and grace are over
                injected({"crash_after_claim": 1.0}),
                contextlib.suppress(faults.SimulatedCrash),
            ):
                self.submit(key, faulty=True)
            again = " (a second one, for the override)" if n else ""
            with self.step(f"case opened: STUCK_PENDING by the sweep{again}"):
                [case_id] = sweep_stuck_claims(every_store(), home=home_store).opened
            opened.append(case_id)
        stuck, stuck2 = opened
        with (
            self.step("case opened: AMBIGUOUS_TIMEOUT (commit applied, answer lost)"),
            injected({"ambiguous_after_commit": 1.0}),
        ):
            assert self.submit("ambiguous-1", faulty=True).kind == "outcome_unknown"
        with (
            self.step("case opened: CANCELLED_TRANSACTION (TransactionConflict)"),
            injected({"transaction_conflict": 1.0}),
        ):
            cancelled = self.submit("conflict-1", faulty=True)
        assert cancelled.case_id, cancelled
        mismatch = self.token_mismatch("mismatch-1")
        self.dispositions(stuck, stuck2, cancelled.case_id, mismatch.case_id)

    def token_mismatch(self, key: str):
        from reconciliation.dynamo.client import dynamodb_client, table_names

        client, foreign = dynamodb_client(), str(uuid.uuid4())
        # Another transaction spends the token first (outside any step: not this case's).
        client.transact_write_items(
            TransactItems=[
                {
                    "Update": {
                        "TableName": table_names().ledger,
                        "Key": {"fund": {"S": "OTHER#USD#0"}},
                        "UpdateExpression": "ADD pledge_count :one",
                        "ExpressionAttributeValues": {":one": {"N": "1"}},
                    }
                }
            ],
            ClientRequestToken=foreign,
        )

        def reuse_token(params, **_kwargs):
            if "ClientRequestToken" in params:
                params["ClientRequestToken"] = foreign

        event = "before-parameter-build.dynamodb.TransactWriteItems"
        client.meta.events.register(event, reuse_token)
        try:
            with self.step("case opened: TOKEN_MISMATCH"):
                outcome = self.submit(key)
        finally:
            client.meta.events.unregister(event, reuse_token)
        assert outcome.kind == "token_parameter_mismatch", outcome
        return outcome

    def durable_record(self, store, case_id: str) -> None:
        """The pledge a DUPLICATE_REJECTED_OK is refused without (its evidence rule: a
        durable record of the intent), written outside any step, as another path would."""
        from reconciliation import clock
        from reconciliation.cases.repository import CaseRepository
        from reconciliation.claims.models import Pledge, PledgeStatus
        from reconciliation.claims.pledges import PledgeRepository

        case = CaseRepository(store).get(case_id)
        assert case is not None and case.intent_id
        pledge = Pledge(
            intent_id=case.intent_id,
            tenant=case.tenant,
            donor_ref=TYPICAL["donor_ref"],
            fund=case.fund,
            amount=case.amount,
            currency=case.currency,
            status=PledgeStatus.RECORDED,
            request_token="bench",
            created_at=clock.iso(clock.now()),
            ledger_key=f"{case.fund}#{case.currency}#0",
        )
        store.client.transact_write_items(
            TransactItems=[PledgeRepository(store).put_item(pledge)]  # type: ignore[list-item]
        )

    def dispositions(self, stuck: str, stuck2: str, cancelled: str, mismatch: str) -> None:
        from reconciliation.actors import Actor, Role
        from reconciliation.cases.repository import CaseRepository
        from reconciliation.cases.vocabulary import Disposition, Override
        from reconciliation.casework.dispositions import case_dispose
        from reconciliation.casework.overrides import override_approve, override_request
        from reconciliation.stores import first_store

        store = first_store()
        staff = Actor(username="ada", role=Role("finance_staff"), address="10.0.0.7")
        boss = Actor(username="sue", role=Role("supervisor"), address="10.0.0.8")

        def version(case_id: str) -> int:
            case = CaseRepository(store).get(case_id)
            assert case is not None
            return case.version

        for label, case_id in (("CANCELLED_TRANSACTION", cancelled), ("TOKEN_MISMATCH", mismatch)):
            self.durable_record(store, case_id)
            with self.step(f"disposition: DUPLICATE_REJECTED_OK ({label}, plain resolve)"):
                result = case_dispose(
                    case_id=case_id,
                    disposition=Disposition.DUPLICATE_REJECTED_OK,
                    staff=StaffAction(actor=staff, seen_version=version(case_id), **WHY),
                    store=store,
                )
            assert result.applied and result.case.state == "RESOLVED", result
        with self.step("disposition: RETRY_COMMIT (STUCK_PENDING; the commit runs inline)"):
            result = case_dispose(
                case_id=stuck,
                disposition=Disposition.RETRY_COMMIT,
                staff=StaffAction(actor=staff, seen_version=version(stuck), **WHY),
                store=store,
            )
        assert CaseRepository(store).get(stuck).state == "RESOLVED"  # type: ignore[union-attr]
        with self.step("override: RELEASE_CLAIM requested (staff)"):
            requested = override_request(
                case_id=stuck2,
                override=Override.RELEASE_CLAIM,
                staff=StaffAction(actor=staff, seen_version=version(stuck2), **WHY),
                store=store,
            )
        with self.step("override: RELEASE_CLAIM approved (a supervisor)"):
            approved = override_approve(
                case_id=stuck2,
                request_id=requested.case.override.request_id,  # type: ignore[union-attr]
                staff=StaffAction(actor=boss, **WHY),
                store=store,
            )
        assert approved.case.state == "RESOLVED", approved


if __name__ == "__main__":
    main()

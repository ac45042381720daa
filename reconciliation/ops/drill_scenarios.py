"""The drill's scenarios and invariant checks, one method each (see
:mod:`reconciliation.ops.drill` for what they prove and in which order they run).

Each scenario submits fresh synthetic intents for tenant ``drill`` into a fund of the
run's own, injects faults for its own block only, into the drill's own calls (its
clients are built for injecting faults, :mod:`reconciliation.simulation.fault_stores`; the
process's shared clients, serving the traffic beside it, carry no fault hook), and
records one :class:`~reconciliation.ops.drill_report.DrillRow`.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import replace
from decimal import Decimal
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from reconciliation import clock
from reconciliation.actors import Actor, Role, system_actor
from reconciliation.audit.chains import stream_chain_status
from reconciliation.cases.actions import StaffAction
from reconciliation.cases.changes import CaseError
from reconciliation.cases.models import DRILL_TENANT, Case
from reconciliation.cases.repository import CaseRepository
from reconciliation.cases.vocabulary import CaseState, CaseType, Disposition, Queue, ReasonCode
from reconciliation.casework.dispositions import case_dispose
from reconciliation.casework.retries import retry_commit_run
from reconciliation.casework.search import cases_for_intent
from reconciliation.casework.sweeps import SweepReport, auto_resolve, sweep_claim
from reconciliation.claims import intake
from reconciliation.claims.ledger import fund_total
from reconciliation.claims.models import (
    OPERATION_CREATE_PLEDGE,
    ClaimStatus,
    claim_pk,
    intent_id_for,
    pledge_home,
)
from reconciliation.claims.outcomes import IntakeOutcome, OutcomeKind
from reconciliation.claims.pledges import PledgeRepository
from reconciliation.claims.repository import ClaimRepository
from reconciliation.claims.request import parse_fields
from reconciliation.claims.versions import VERSIONS
from reconciliation.dynamo.cancellation import CancellationCode
from reconciliation.dynamo.errors import ErrorCode, error_code
from reconciliation.dynamo.items import transact_items
from reconciliation.ops.drill_report import DrillReport, DrillRow, DrillStatus
from reconciliation.simulation import faults
from reconciliation.simulation.fault_stores import FaultStores
from reconciliation.stores import Store, every_store, pledge_stream

TENANT = DRILL_TENANT
AMOUNT = Decimal("10.00")

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef


class Drill:
    """One drill run: its fresh fund and keys, what must hold at the end, and its report;
    each scenario is a method, called in order by :func:`drill_run`."""

    def __init__(self) -> None:
        self.run = uuid.uuid4().hex[:10]
        self.fund = f"DRILL_{self.run.upper()}"
        self.actor = Actor(username=f"api:{TENANT}", role=Role.API, address="drill")
        self.version = VERSIONS.current
        self.report = DrillReport(self.run, clock.iso(clock.now()), False)
        self.committed: list[str] = []  # keys whose pledge must exist at the end
        self.cases: dict[str, str] = {}  # case id -> expected final state
        self.n = 0
        # The drill's own clients: the faults of a scenario reach its calls and no others.
        self.stores = FaultStores()

    def key(self) -> str:
        self.n += 1
        return f"drill-{self.run}-{self.n}"

    def store(self, key: str) -> Store:
        """``key``'s home region's tables, on the drill's own fault-injecting client."""
        return self.stores.home(claim_pk(TENANT, OPERATION_CREATE_PLEDGE, key))

    def submit(
        self, key: str, amount: Decimal = AMOUNT, *, lease_s: int | None = None
    ) -> IntakeOutcome:
        request = parse_fields(
            {
                "donor_ref": f"SYN-{self.run}",
                "fund": self.fund,
                "amount": f"{amount:.2f}",
                "currency": "USD",
            }
        )
        return intake.pledge_submit(
            tenant=TENANT,
            idempotency_key=key,
            request=request,
            actor=self.actor,
            terms=intake.ClaimTerms(lease_s=lease_s, version=self.version),
            store=self.store(key),
        )

    def row(
        self,
        scenario: str,
        expected: str,
        observed: str,
        ok: bool | None,
        *,
        status: DrillStatus | None = None,
    ) -> None:
        """One report row: passed or failed by ``ok`` (``None``: not provable here),
        unless ``status`` says otherwise (e.g. not applicable)."""
        status = status or (
            DrillStatus.UNPROVABLE if ok is None else DrillStatus.PASS if ok else DrillStatus.FAIL
        )
        self.report.rows.append(DrillRow(scenario, expected, observed, status))

    def ledger(self) -> tuple[Decimal, int]:
        total = fund_total(every_store(), self.fund, "USD")
        return total.pledged_total, total.pledge_count

    # --- the engine's token semantics ------------------------------------------------

    def probe_token(self) -> bool:
        store = self.store("probe")
        key = f"DRILLPROBE#{self.run}"
        token = str(uuid.uuid4())
        item: list[TransactWriteItemTypeDef] = [
            {
                "Update": {
                    "TableName": store.tables.ledger,
                    "Key": {"fund": {"S": key}},
                    "UpdateExpression": "ADD pledge_count :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            }
        ]
        for _ in range(2):
            store.client.transact_write_items(TransactItems=item, ClientRequestToken=token)
        stored = store.client.get_item(
            TableName=store.tables.ledger, Key={"fund": {"S": key}}, ConsistentRead=True
        )["Item"]
        store.client.delete_item(TableName=store.tables.ledger, Key={"fund": {"S": key}})
        return stored["pledge_count"]["N"] == "1"

    # --- scenarios -------------------------------------------------------------------

    def first_commit(self) -> str:
        key = self.key()
        outcome = self.submit(key)
        total = self.ledger()
        stored = self.stored_versions(key)
        self.report.pledge_version = stored[0] if len(set(stored)) == 1 else ""
        ok = (
            outcome.kind == OutcomeKind.CREATED
            and total == (AMOUNT, 1)
            and stored == [self.version.name] * 2
        )
        self.row(
            "1 first commit",
            f"201 created; ledger +10.00; request version {self.version.name}",
            f"{OutcomeKind.words(outcome.kind)}; ledger {total[0]:.2f} ({total[1]}); "
            f"claim and pledge store version {' and '.join(stored) or 'none'}",
            ok,
        )
        if outcome.kind == OutcomeKind.CREATED:
            self.committed.append(key)
        return key

    def stored_versions(self, key: str) -> list[str]:
        """The ``Pledge-Version`` the claim and the pledge of ``key`` store (each that
        exists and names one)."""
        store = self.store(key)
        claim = ClaimRepository(store).get(claim_pk(TENANT, OPERATION_CREATE_PLEDGE, key))
        pledge = PledgeRepository(store).get(intent_id_for(TENANT, key))
        return [
            record.pledge_version
            for record in (claim, pledge)
            if record is not None and record.pledge_version
        ]

    def resend(
        self, key: str, *, new_token: bool = False, amount: Decimal | None = None
    ) -> ClientError | None:
        """Send again the transaction that committed ``key`` (rebuilt from its claim, as
        the committing attempt saw it), optionally with a changed amount or a new token.
        Returns the ClientError DynamoDB answered with, or None if it accepted."""
        store = self.store(key)
        claim = ClaimRepository(store).get(claim_pk(TENANT, OPERATION_CREATE_PLEDGE, key))
        if claim is None:  # only committed keys are resent, and their claims are kept
            raise LookupError(f"no claim for the committed key {key}")
        attempt = replace(claim, status=ClaimStatus.PENDING, version=claim.version - 1)
        if amount is not None:
            attempt = replace(attempt, request={**claim.request, "amount": f"{amount:.2f}"})
        built, _ = intake.commit_items(store, attempt)
        items = transact_items(built)
        token = str(uuid.uuid4()) if new_token else claim.request_token
        try:
            store.client.transact_write_items(TransactItems=items, ClientRequestToken=token)
        except ClientError as exc:
            return exc
        return None

    def ledger_untouched(self, observed: list[str]) -> bool:
        total = self.ledger()
        observed.append(f"ledger {total[0]:.2f} ({total[1]})")
        return total == (AMOUNT, 1)

    def identical_retry(self, key: str) -> None:
        scenario = "2 identical retry, same token"
        replay = self.submit(key)
        observed = [f"API {OutcomeKind.words(replay.kind)}"]
        if not self.report.engine_honours_token:
            observed.append("token replay not provable on this engine")
            self.row(scenario, "no second write", "; ".join(observed), None)
            return
        # Re-send the very transaction that committed, under its token.
        error = self.resend(key)
        observed.append(
            f"DynamoDB: {ErrorCode.words(error_code(error))}"
            if error
            else "DynamoDB answered success"
        )
        ok = replay.kind == OutcomeKind.REPLAYED and error is None
        ok = self.ledger_untouched(observed) and ok
        self.row(scenario, "200 replay; token replay applies nothing", "; ".join(observed), ok)

    def changed_amount(self, key: str) -> None:
        scenario = "3 same token, changed amount"
        api = self.submit(key, amount=AMOUNT + 1)
        observed = [f"API {OutcomeKind.words(api.kind)}"]
        if not self.report.engine_honours_token:
            observed.append("token mismatch not provable on this engine")
            self.row(scenario, "rejected as a mismatch", "; ".join(observed), None)
            return
        error = self.resend(key, amount=AMOUNT + 1)
        code = error_code(error) if error else ""
        observed.append(f"DynamoDB: {ErrorCode.words(code)}" if error else "DynamoDB accepted it")
        ok = api.kind == OutcomeKind.KEY_REUSED
        ok = ok and code == ErrorCode.TOKEN_MISMATCH
        ok = self.ledger_untouched(observed) and ok
        expected = (
            f"422 key reused; DynamoDB: {ErrorCode.words('IdempotentParameterMismatchException')}"
        )
        self.row(scenario, expected, "; ".join(observed), ok)

    def delayed_duplicate(self, key: str) -> None:
        # A new token: DynamoDB treats it as a new request, as after the 10-minute window.
        error = self.resend(key, new_token=True)
        reasons = [
            r.get("Code") for r in (error.response.get("CancellationReasons", []) if error else [])
        ]
        observed = [
            f"DynamoDB: {ErrorCode.words(error_code(error))} "
            f"({', '.join(CancellationCode.words(r) for r in reasons[:1])})"
            if error
            else "DynamoDB applied it"
        ]
        ok = bool(reasons) and reasons[0] == CancellationCode.CONDITIONAL_CHECK_FAILED
        ok = self.ledger_untouched(observed) and ok
        self.row(
            "4 delayed duplicate, new token",
            "refused by the durable pledge key",
            "; ".join(observed),
            ok,
        )

    def ambiguous(self) -> None:
        key = self.key()
        with self.stores.injected({"ambiguous_after_commit": 1.0}):
            outcome = self.submit(key)
        pledge = intake.pledge_get(pledge_home(TENANT, key), tenant=TENANT, idempotency_key=key)
        observed = [
            OutcomeKind.words(outcome.kind),
            f"durable record {'found' if pledge else 'absent'}",
        ]
        ok = outcome.kind == OutcomeKind.OUTCOME_UNKNOWN and pledge is not None
        if outcome.case_id:
            auto_resolve(self.store(key), outcome.case_id, SweepReport())
            case = CaseRepository(self.store(key)).get(outcome.case_id)
            observed.append(f"case {CaseState.words(case.state) if case else 'missing'}")
            self.cases[outcome.case_id] = CaseState.RESOLVED
            ok = ok and case is not None and case.state == CaseState.RESOLVED
        else:
            ok = False
            observed.append("no case")
        if pledge is not None:
            self.committed.append(key)
        self.row(
            "5 ambiguous timeout after commit",
            "202; GET finds it; case auto-resolved",
            "; ".join(observed),
            ok,
        )

    def crashed_case(self, key: str) -> Case | None:
        """Submit ``key`` and crash between its claim and its commit; once the claim's
        lease has run out the sweep opens its case, returned (``None``: it opened none)."""
        # A 1-second lease for this claim alone, passed down: the drill runs inside a
        # worker or web process whose other requests keep the configured lease.
        with (
            self.stores.injected({"crash_after_claim": 1.0}),
            contextlib.suppress(faults.SimulatedCrash),
        ):
            self.submit(key, lease_s=1)
        time.sleep(1.5)
        pk = claim_pk(TENANT, OPERATION_CREATE_PLEDGE, key)
        case: Case | None = sweep_claim(pk, grace_s=0, store=self.store(key))
        return case

    def crashed_recover(
        self, case: Case, key: str, *, reason_text: str
    ) -> tuple[bool, Case | None]:
        """Recover the crashed intent of ``case`` as a person would: the retry-commit
        disposition (as the system), and its retry run here. Returns whether the
        disposition applied, and the case as it ends."""
        store = self.store(key)
        result = case_dispose(
            case_id=case.case_id,
            disposition=Disposition.RETRY_COMMIT,
            staff=StaffAction(
                actor=system_actor(),
                reason_code=ReasonCode.TRANSIENT_FAILURE,
                reason_text=reason_text,
                seen_version=case.version,
            ),
            store=store,
        )
        # Inline as well as queued: whichever runs first commits, the other finds the
        # case resolved (the durable key makes a second commit impossible anyway).
        with contextlib.suppress(CaseError):
            retry_commit_run(
                case.case_id,
                store=store,
                request_id=result.case.retry.request_id if result.case.retry else None,
            )
        self.cases[case.case_id] = CaseState.RESOLVED
        if intake.pledge_get(pledge_home(TENANT, key), tenant=TENANT, idempotency_key=key):
            self.committed.append(key)
        return result.applied, CaseRepository(store).get(case.case_id)

    def crash(self) -> None:
        key = self.key()
        case = self.crashed_case(key)
        observed = [f"sweep opened {CaseType.words(case.case_type) if case else 'nothing'}"]
        ok = (
            case is not None
            and case.case_type == CaseType.STUCK_PENDING
            and case.queue == Queue.STUCK_PENDING
        )
        if case is not None:
            applied, final = self.crashed_recover(
                case, key, reason_text="Drill: recover the crashed intent by retrying its commit."
            )
            final_state = final.state if final is not None else "absent"
            observed.append(f"retry → case {CaseState.words(final_state)}")
            ok = ok and applied and final_state == CaseState.RESOLVED
        self.row(
            "6 crash between claim and commit",
            f"sweep opens a {CaseType.words('STUCK_PENDING').lower()} case; retry commits once",
            "; ".join(observed),
            ok,
        )

    # --- invariants ------------------------------------------------------------------

    def invariants(self) -> None:
        expected = (AMOUNT * len(self.committed), len(self.committed))
        total = self.ledger()
        recorded = Decimal("0")
        for key in self.committed:
            pledge = intake.pledge_get(pledge_home(TENANT, key), tenant=TENANT, idempotency_key=key)
            recorded += Decimal(pledge["amount"]) if pledge else 0
        self.row(
            "ledger = intended commitments",
            f"{expected[0]} ({expected[1]} pledges)",
            f"{total[0]} ({total[1]}); recorded pledges sum {recorded}",
            total == expected and recorded == expected[0],
        )
        misplaced = []
        # Each stream is read in its key's home region, where it was written, under the
        # name that region gives it.
        streams = [
            (pledge_stream(intent_id_for(TENANT, k), self.store(k).tag), self.store(k))
            for k in self.committed
        ]
        for n in range(1, self.n + 1):
            key = f"drill-{self.run}-{n}"
            for case in cases_for_intent(intent_id_for(TENANT, key), store=self.store(key)):
                streams.append((f"CASE#{case.case_id}", self.store(key)))
                want = self.cases.get(case.case_id)
                if want != case.state:
                    misplaced.append(
                        f"{case.case_id} {CaseState.words(case.state)} "
                        f"(expected {CaseState.words(want)})"
                    )
        self.row(
            "every case where expected",
            f"{len(self.cases)} cases, all {CaseState.words(CaseState.RESOLVED).lower()}",
            "; ".join(misplaced) or f"{len(self.cases)} cases as expected",
            not misplaced,
        )
        checks = (stream_chain_status(stream, store=store) for stream, store in streams)
        broken = [status.line() for status in checks if not status.ok]
        self.row(
            "every audit chain verifies",
            f"{len(streams)} streams intact",
            "; ".join(broken) or f"{len(streams)} streams intact",
            not broken,
        )

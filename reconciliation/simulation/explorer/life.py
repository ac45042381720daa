"""One intent's life under one plan: the client's requests through the API as its contract
tells it, then the system at rest (the sweep, a person's RETRY_COMMIT, the retry task),
the world going on while a worker is stalled past its lease, and the checks made right
after each episode.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings

from reconciliation import clock
from reconciliation.actors import Actor, Role
from reconciliation.cases.actions import StaffAction
from reconciliation.cases.changes import CaseError
from reconciliation.cases.policy import allowed_actions
from reconciliation.cases.vocabulary import Disposition, ReasonCode
from reconciliation.casework.dispositions import case_dispose
from reconciliation.casework.retries import RetryOutcome, retry_commit_run
from reconciliation.casework.sweeps import RETRY_STALE_S, SweepReport, sweep_claims_and_cases
from reconciliation.claims.models import ClaimStatus, intent_id_for
from reconciliation.claims.outcomes import OutcomeKind
from reconciliation.claims.repository import ClaimTaken
from reconciliation.dynamo import attempts
from reconciliation.dynamo.retry import RetriesExhausted
from reconciliation.simulation import faults
from reconciliation.simulation.explorer.vocabulary import MAY_HAVE_APPLIED, TENANT
from reconciliation.simulation.explorer.wire import Wire
from reconciliation.simulation.invariants import ESCAPED, LOST, Answer, Problem
from reconciliation.stores import case_store, every_store, home_store

if TYPE_CHECKING:
    from django.test.client import _MonkeyPatchedWSGIResponse as TestResponse

MAX_REQUESTS = 6  # the client's budget for one intent
RERUNS = 3  # runs of one sweep or disposition after it was aborted
MAX_TASK_RUNS = 8  # retry task runs at rest (Celery's redeliveries and lease waits)
RESEND = frozenset(
    {(409, OutcomeKind.IN_PROGRESS), (409, OutcomeKind.CONFLICT), (409, OutcomeKind.CANCELLED)}
)
STAFF = Actor(username="explorer-staff", role=Role.FINANCE_STAFF, email="explorer@example.org")
REASON = "Explorer: the commit met a transient failure; retry it."
ABORTED, BROKEN = "aborted", "broken"
# A task or a person's action that fails with these is logged and simply run again.
TOLERATED = (BotoCoreError, ClientError, RetriesExhausted, ClaimTaken, CaseError)


class Host(Protocol):
    """What a life needs of the worker session it runs in (``session.Session``): its
    hooked wire, the retry tasks dispatched, the API client and the oracle's reads."""

    wire: Wire
    dispatched: list[str]

    def http_call(self, method: str, key: str, request_id: str = "") -> TestResponse: ...

    def pledge_exists(self, intent_id: str) -> bool: ...

    def claim(self, key: str) -> dict[str, Any] | None: ...

    def case_ids(self, intent_id: str) -> set[str]: ...

    def open_cases(self, intent_id: str) -> list[dict[str, Any]]: ...


def client_next(answer: Answer) -> tuple[str | None, int]:
    """What a client following the API contract does after ``answer``: the next request
    (``None``: it stops) and how many seconds it waits first (Retry-After)."""
    if answer.status is None:
        return answer.method, 0  # no answer: send the same request again
    wait = max(answer.retry_after, 1)
    if answer.method == "GET":
        if answer.status == 404:
            return "POST", 0
        return ("GET", wait) if answer.status == 503 else (None, 0)
    if answer.status == 202 and answer.error == OutcomeKind.OUTCOME_UNKNOWN:
        return "GET", 0
    if answer.status == 503 or (answer.status, answer.error) in RESEND:
        return "POST", wait
    return None, 0


def read_response(answer: Answer, response: TestResponse) -> None:
    answer.status = response.status_code
    retry_after = response.get("Retry-After") or "0"
    answer.retry_after = int(retry_after) if retry_after.isdigit() else 0
    if not response.get("Content-Type", "").startswith("application/json"):
        answer.json = False
        return
    try:
        data = json.loads(response.content)
    except ValueError:
        answer.json = False
        return
    answer.error = data.get("error") if isinstance(data, dict) else None


class Life:
    """One intent's life under one plan: the client's requests, then the system at rest."""

    def __init__(self, session: Host, key: str):
        self.session = session
        self.wire = session.wire
        self.key = key
        self.intent_id = intent_id_for(TENANT, key)
        self.answers: list[Answer] = []
        self.problems: list[Problem] = []
        self.episodes: Counter[str] = Counter()
        self._clock = contextlib.ExitStack()

    def live(self) -> None:
        self.wire.on_stall = self._while_stalled
        with self._clock:  # every advance of the simulated clock is undone at the end
            self._client()
            self._at_rest()

    def _while_stalled(self, point: str) -> None:
        """The world goes on while a worker is paused past its lease: the sweep runs and
        the client, hearing nothing, sends its request again. Its own calls are heard by
        nobody's attempt log but their own (a separate context)."""

        def elsewhere() -> None:
            with attempts.detached():
                self._advance(settings.CLAIM_PENDING_TTL_S + settings.STUCK_GRACE_S + 1)
                self._sweep()
                self.answers.append(self._request("POST"))

        contextvars.copy_context().run(elsewhere)

    def _advance(self, seconds: int) -> None:
        self._clock.enter_context(clock.travel(seconds))

    def _begin(self, kind: str) -> str:
        self.episodes[kind] += 1
        episode = f"{kind}#{self.episodes[kind]}"
        self.wire.begin(episode)
        return episode

    def _client(self) -> None:
        method = "POST"
        for _ in range(MAX_REQUESTS):
            answer = self._request(method)
            self.answers.append(answer)
            next_method, wait = client_next(answer)
            if next_method is None:
                return
            method = next_method
            self._advance(wait)

    def _request(self, method: str) -> Answer:
        answer = Answer(self._begin(method), method)
        request_id = f"xf-{answer.episode.replace('#', '-')}-{self.key[-8:]}"
        try:
            read_response(answer, self.session.http_call(method, self.key, request_id))
        except faults.SimulatedCrash:
            pass  # the serving process died: the client hears nothing
        except Exception as exc:  # the view let it escape: the client sees an HTML 500
            answer.status, answer.json = 500, False
            answer.escaped = f"{type(exc).__name__}: {exc}"[:300]
        commits = [c for c in self.wire.calls if (c.episode, c.label) == (answer.episode, "commit")]
        answer.commit_applied = any(c.status == 200 for c in commits)
        answer.commit_maybe = any(c.fault in MAY_HAVE_APPLIED for c in commits)
        answer.pledge_exists = self.session.pledge_exists(self.intent_id)
        self._check_episode(answer.episode)
        if (answer.status, answer.error) == (409, OutcomeKind.IN_PROGRESS):
            self._check_not_own_claim(answer.episode, request_id)
        return answer

    def _check_episode(self, episode: str) -> None:
        """Right after an episode that set out to open a case for the intent: its claim
        left the stuck-claim index only with its pledge or its case (docs/design.md §3), so a
        case that could not be written leaves the claim where the sweep will find it."""
        about = {
            c.case_claim_version for c in self.wire.calls if c.episode == episode and c.case_open
        }
        claim = self.session.claim(self.key)
        if (
            claim is None
            or claim.get("status") == ClaimStatus.COMPLETED
            or claim.get("pending_shard")
        ):
            return
        # The claim as the case opening left it: at the version the case is about, or one
        # further when the opening finalises it (a later writer's claim is not its doing).
        version = int(claim.get("version", 0))
        if not about & {version, version - 1}:
            return
        if claim.get("case_id") in self.session.case_ids(self.intent_id):
            return
        self.problems.append(
            Problem(
                LOST,
                f"{episode}: the claim (v{claim.get('version')}, {claim.get('status')}) left "
                "the stuck-claim index without its case, which could not be written",
            )
        )

    def _check_not_own_claim(self, episode: str, request_id: str) -> None:
        """A request that holds the claim itself (its own claim put or re-claim applied,
        the response lost) must not answer 'in progress' about it: nobody would then hold
        the key for a whole lease."""
        claim = self.session.claim(self.key)
        if (
            claim
            and claim.get("status") == ClaimStatus.PENDING
            and claim.get("correlation_id") == request_id
        ):
            self.problems.append(
                Problem(
                    LOST,
                    f"{episode}: answered 409 request_in_progress for a claim "
                    f"(v{claim.get('version')}) this very request holds",
                )
            )

    def _at_rest(self) -> None:
        past_lease = settings.CLAIM_PENDING_TTL_S + settings.STUCK_GRACE_S + 1
        self._advance(past_lease)
        busy = self._sweep()
        busy = self._dispose_open_cases() or busy
        busy = self._run_retries() or busy
        if busy:
            self._advance(RETRY_STALE_S + past_lease)
            self._sweep()
            self._run_retries()

    def _background(self, kind: str, work: Callable[[], Any]) -> Any:
        """One task run or action; a crash or a DynamoDB failure aborts it (and it is run
        again), anything else escaping is a defect."""
        episode = self._begin(kind)
        try:
            return work()
        except faults.SimulatedCrash:
            return ABORTED
        except TOLERATED:
            return ABORTED
        except Exception as exc:
            detail = f"{episode}: {type(exc).__name__} escaped: {exc}"[:300]
            self.problems.append(Problem(ESCAPED, detail))
            return BROKEN
        finally:
            self._check_episode(episode)

    def _sweep(self) -> bool:
        """The beat's sweep; an aborted run is run again, as the next tick would."""

        # One intent's life: the fund-wide ledger drift check is not part of it (it has
        # tests of its own; its reads would multiply the call points explored).
        def sweep() -> SweepReport:
            return sweep_claims_and_cases(every_store(), home=home_store, grace_s=0)

        for run in range(RERUNS):
            report = self._background("sweep", sweep)
            # A run that could not handle a claim (report.errors) has not completed: the
            # next tick takes it again.
            if report is not ABORTED and not getattr(report, "errors", None):
                return run > 0
        return True

    def _dispose_open_cases(self) -> bool:
        """A person records RETRY_COMMIT on every open case that offers it."""
        disposed = False
        for case in self.session.open_cases(self.intent_id):
            if Disposition.RETRY_COMMIT not in allowed_actions(
                case["case_type"], case["state"], Role.FINANCE_STAFF
            ):
                continue
            disposed = True
            for _ in range(RERUNS):
                if self._background("dispose", functools.partial(_dispose, case)) is not ABORTED:
                    break
        return disposed

    def _run_retries(self) -> bool:
        """The retry task for each dispatched case: run again after a crash or a transient
        error (acks_late, autoretry) and after the lease wait it asks for."""
        pending, runs = self.session.dispatched, 0
        while pending and runs < MAX_TASK_RUNS:
            case_id, runs = pending[0], runs + 1
            outcome = self._background(
                "retry", functools.partial(retry_commit_run, case_id, store=case_store(case_id))
            )
            if outcome is ABORTED:
                continue
            pending.pop(0)
            if isinstance(outcome, RetryOutcome) and outcome.wait_s is not None:
                self._advance(outcome.wait_s + 1)
                pending.append(case_id)
        return runs > 0


def _dispose(case: dict[str, Any]) -> str:
    try:
        return case_dispose(
            store=case_store(case["case_id"]),
            case_id=case["case_id"],
            disposition=Disposition.RETRY_COMMIT,
            staff=StaffAction(
                actor=STAFF,
                reason_code=ReasonCode.TRANSIENT_FAILURE,
                reason_text=REASON,
                seen_version=int(case["version"]),
                action_id=f"xf-retry-{case['case_id']}",
            ),
            # The form's action id: submitting it again after a crash is a no-op.
        ).message
    except CaseError as exc:
        return f"refused: {exc}"  # the person reads why; nothing to run again

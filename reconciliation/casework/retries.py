"""RETRY_COMMIT in the background (docs/design.md §6): queueing the retry, and the Celery
task's body that commits the case's intent again under the claim's token and resolves
the case when the pledge is there."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, replace
from typing import Any

from celery import current_app
from kombu.exceptions import OperationalError

from reconciliation import clock
from reconciliation.actors import system_actor
from reconciliation.cases.changes import CaseChanged, case_commit_change
from reconciliation.cases.models import Case, CommitRetry
from reconciliation.cases.policy import ACTIVE_STATES
from reconciliation.cases.repository import CaseRepository
from reconciliation.cases.transitions import Grounds, case_retry_failed, case_retry_resolved
from reconciliation.cases.vocabulary import CaseState, Disposition, RetryStatus
from reconciliation.casework.evidence import pledge_matches_case
from reconciliation.claims import intake
from reconciliation.claims.models import Claim, ClaimBody, ClaimKey, ClaimStatus, Pledge
from reconciliation.claims.outcomes import SUCCESS, OutcomeKind
from reconciliation.claims.pledges import PledgeRepository
from reconciliation.claims.repository import ClaimRepository, ClaimTaken
from reconciliation.claims.request import PledgeRequest
from reconciliation.claims.versions import VERSIONS
from reconciliation.stores import Store

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryOutcome:
    """What one run of a case's retry did: ``kind`` is ``resolved``, ``committed``,
    ``already_committed``, ``nothing_to_do`` or the commit's failure kind; ``wait_s`` is
    set when the claim's lease still runs and the retry must run again after it."""

    kind: str
    wait_s: int | None = None

    @classmethod
    def wait(cls, seconds: int) -> RetryOutcome:
        return cls("wait", wait_s=max(1, seconds))


# The Celery task that runs :func:`retry_commit_run` (reconciliation/casework/tasks.py).
# Services reach it by its registered name, as beat does: the tasks call the services,
# so a service importing the task module would close an import cycle (docs/design.md §2).
RETRY_COMMIT_TASK = "reconciliation.tasks.cases.retry_commit_task"


def enqueue_retry(case_id: str, request_id: str | None = None) -> None:
    """Queue the retry asked for as ``request_id``. If the broker is down the case keeps
    ``retry.status = queued`` and the sweep dispatches it again later: the request is
    never lost."""
    # Registered in every process: ReconciliationConfig.ready() imports the tasks.
    retry_commit_task = current_app.tasks[RETRY_COMMIT_TASK]
    try:
        retry_commit_task.delay(case_id, request_id)
    except OperationalError as exc:
        logger.warning(
            "retry of case %s not queued (%s); the sweep will re-dispatch it",
            case_id,
            exc.__class__.__name__,
        )


def retry_due(case: Case | None, request_id: str | None) -> bool:
    """Whether the retry asked for as ``request_id`` is still this case's to run: the case
    is open or escalated (not resolved, not awaiting a supervisor), and its retry is that
    request and has not finished. An old message without a request id runs the current
    unfinished retry. A second delivery of a retry that ended, or of one a newer request
    replaced, finds it not due and writes nothing."""
    if case is None or case.state not in ACTIVE_STATES or not case.retry:
        return False
    if case.retry.finished:
        return False
    return request_id is None or case.retry.request_id == request_id


# How often one run re-decides after another hand changed the case under it (someone
# assigned or escalated it meanwhile); a resolution or a newer request ends it at once.
_REDECIDE = 3


def retry_commit_run(case_id: str, *, store: Store, request_id: str | None = None) -> RetryOutcome:
    """Re-run the commit of a case's intent (the Celery task's body) and say what
    happened (:class:`RetryOutcome`). One idempotent operation per request
    (``request_id``, the case's ``retry.request_id``): duplicate-safe on the money side
    (the durable pledge key refuses a second pledge; the claim's stored token is reused
    inside the 10-minute window), and on the case side its result is written only on
    the case version this run read, while the retry is still due. A second delivery, or
    a run that loses the case to another hand (the re-check resolving it, a person),
    writes nothing and is counted (``case_changes_lost_total``)."""
    for _ in range(_REDECIDE):
        case = CaseRepository(store).get(case_id)
        if not retry_due(case, request_id):
            return RetryOutcome(RetryStatus.NOTHING_TO_DO)
        assert case is not None  # retry_due
        try:
            return _retry_once(store, case)
        except ClaimTaken:
            # Another run of this retry, or the client's own retry, holds the key now:
            # wait for its lease, then decide again from what it left.
            claim = ClaimRepository(store).get(case.claim_pk)
            if claim is not None and claim.status == ClaimStatus.PENDING and not claim.expired():
                return RetryOutcome.wait(claim.expires_at - clock.epoch())
        except CaseChanged as lost:
            if not retry_due(lost.current, request_id):
                return RetryOutcome(RetryStatus.NOTHING_TO_DO)
    return RetryOutcome(RetryStatus.NOTHING_TO_DO)


def _retry_once(store: Store, case: Case) -> RetryOutcome:
    """One decision on ``case`` as read: commit if no pledge is there, then write the
    result conditioned on that read's version (``case_commit_change``)."""
    actor = system_actor()
    pledge = PledgeRepository(store).get(case.intent_id, consistent=True)
    claim = ClaimRepository(store).get(case.claim_pk)
    if (
        pledge is None
        and claim is not None
        and claim.status == ClaimStatus.PENDING
        and not claim.expired()
    ):
        return RetryOutcome.wait(claim.expires_at - clock.epoch())
    kind, superseded_by = _commit_unless_recorded(store, case, pledge, claim)
    now = clock.now()
    finished_at = clock.iso(now)
    retry = (
        replace(case.retry, status=kind, finished_at=finished_at)
        if case.retry
        else CommitRetry(status=kind, finished_at=finished_at)
    )
    grounds = Grounds(actor, now, f"retry-{retry.request_id}")
    if kind in (*SUCCESS, RetryStatus.ALREADY_COMMITTED) or superseded_by:
        change = case_retry_resolved(case, grounds, retry, superseded_by=superseded_by)
        case_commit_change(store, case, *change)
        if superseded_by:
            return RetryOutcome(kind)
        return RetryOutcome(
            RetryStatus.COMMITTED if kind == OutcomeKind.CREATED else RetryStatus.ALREADY_COMMITTED
        )
    case_commit_change(store, case, *case_retry_failed(case, grounds, retry))
    return RetryOutcome(kind)


def _commit_unless_recorded(
    store: Store, case: Case, pledge: Pledge | None, claim: Claim | None
) -> tuple[str, str | None]:
    """Commit the case's request again unless a pledge holds its key: the outcome's kind,
    and the case that now carries the intent when the retry's own unclear outcome opened
    one (still open)."""
    if pledge is not None and not pledge_matches_case(pledge, case):
        # A pledge with another payload holds the key: this request cannot be recorded
        # under it. The retry ends without recording; the case stays for a person.
        return "key_reused", None
    if pledge is not None:
        return RetryStatus.ALREADY_COMMITTED, None
    case_id = case.case_id
    claim = _retry_claim(store, case, claim)
    outcome = intake.pledge_commit(store, claim)
    kind = outcome.kind
    successor = (
        CaseRepository(store).get(outcome.case_id)
        if outcome.case_id not in (None, case_id)
        else None
    )
    if successor is not None and successor.state != CaseState.RESOLVED:
        # The retry's own unclear outcome opened a case of its own, still open: that
        # case now carries the intent, so this one closes pointing at it (one open case).
        return kind, successor.case_id
    if kind not in SUCCESS:
        _keep_claim_with_case(store, claim, case_id)
    return kind, None


def _keep_claim_with_case(store: Store, claim: Claim, case_id: str) -> None:
    """A failed retry that opened no case of its own may have left its new attempt's
    claim PENDING in the stuck-claim index: this case, still open, follows it, so the
    sweep does not open a second case for the same intent."""
    current = ClaimRepository(store).get(claim.pk)
    if (
        current is None
        or current.status != ClaimStatus.PENDING
        or current.attempt_id != claim.attempt_id
        or current.pending_shard is None
    ):
        return
    with contextlib.suppress(ClaimTaken):
        ClaimRepository(store).attach_case(
            current, case_id=case_id, error_code=Disposition.RETRY_COMMIT
        )


def _retry_claim(store: Store, case: Case, claim: Claim | None) -> Claim:
    """The claim a retry commits under, when a consistent read found no pledge.

    The case's own attempt, still PENDING and inside its token window, is committed again
    as it was: the identical transaction under its token, so if the first send is still
    in flight DynamoDB applies it once. Otherwise this is a new attempt with a token of
    its own: the key is claimed afresh, or re-claimed whatever its status says, since a
    COMPLETED claim whose pledge a consistent read cannot find records nothing."""
    if (
        claim is not None
        and claim.status == ClaimStatus.PENDING
        and claim.version == case.claim_version
        and claim.request_token == case.request_token
        and claim.token_evidence(clock.now())["inside_token_window"]
    ):
        return claim
    attempt = ClaimRepository(store).new_claim(
        key=ClaimKey(case.claim_pk, case.tenant, case.idempotency_key, case.intent_id),
        body=ClaimBody(
            payload_hash=_payload_hash(case.request.normalised(), case.request.pledge_version),
            request=case.request.normalised(),
            pledge_version=case.request.pledge_version,
        ),
        correlation_id=system_actor().correlation_id,
        client_address="",
    )
    if claim is None:
        return ClaimRepository(store).create(attempt)
    return ClaimRepository(store).reclaim(claim, attempt=attempt)


def _payload_hash(request: dict[str, Any], pledge_version: str | None) -> str:
    """The request hashed by the rules of the version its claim was stored under."""
    return VERSIONS.stored(pledge_version).payload_hash(PledgeRequest.from_normalised(request))

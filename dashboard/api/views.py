"""The intake API: ``POST /api/v1/pledges`` and ``GET /api/v1/pledges/<key>``.

Thin translation only: authenticate, parse, check the fund against the tenant's registered
funds, call one service, map its outcome to HTTP (docs/design.md §4 outcome table). Bearer
tokens map callers to tenants; a new key is held to the tenant's rate limit before anything
is written (dashboard/api/intake_limit.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_safe

from dashboard.api.intake_limit import intake_take
from dashboard.auth import CorrelatedRequest, client_address
from dashboard.lib.statuses import INTAKE
from dashboard.tenancy.models import ApiToken, Caller, TokenRefusal
from reconciliation.actors import Actor, Role
from reconciliation.claims import intake
from reconciliation.claims.funds import fund_check
from reconciliation.claims.models import pledge_home
from reconciliation.claims.outcomes import OutcomeKind, retry_after_s
from reconciliation.claims.request import (
    MAX_BODY_BYTES,
    InvalidRequest,
    PledgeRequest,
    parse_body,
    parse_idempotency_key,
)
from reconciliation.claims.request_log import IntakeAnswer, intake_request_new
from reconciliation.claims.request_log_buffer import intake_request_buffer
from reconciliation.claims.versions import VERSION_HEADER, parse_pledge_version
from reconciliation.metrics import INTAKE_RATE_LIMITED
from reconciliation.stores import Store, first_store


def _error(status: int, code: str, detail: str, **extra: object) -> JsonResponse:
    return JsonResponse({"error": code, "detail": detail, **extra}, status=status)


def _bearer(request: HttpRequest) -> str | None:
    scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
    return raw.strip() if scheme.lower() == "bearer" and raw.strip() else None


def _caller(request: HttpRequest) -> Caller | TokenRefusal | None:
    """The tenant, its registered funds and intake limit, in one query
    (``ApiToken.authenticate``); why the token was refused; ``None`` without one."""
    raw = _bearer(request)
    caller = ApiToken.authenticate(raw) if raw else None
    # Read by ServerTimingMiddleware: timings go to callers who proved who they are.
    request.api_tenant = caller.tenant if isinstance(caller, Caller) else None  # type: ignore[attr-defined]
    return caller


_REFUSALS = {
    None: ("unauthorized", "A valid bearer token is required."),
    TokenRefusal.UNKNOWN: (TokenRefusal.UNKNOWN, "This bearer token is not known."),
    TokenRefusal.REVOKED: (TokenRefusal.REVOKED, "This bearer token was revoked."),
    TokenRefusal.EXPIRED: (TokenRefusal.EXPIRED, "This bearer token has expired."),
}


def _unauthorized(refusal: TokenRefusal | None) -> JsonResponse:
    code, detail = _REFUSALS[refusal]
    response = _error(401, str(code), detail)
    # RFC 6750 §3: a request without a token gets no error attribute.
    response["WWW-Authenticate"] = (
        'Bearer realm="pledges"'
        if refusal is None
        else 'Bearer realm="pledges", error="invalid_token"'
    )
    return response


def _rate_limited(caller: Caller, key: str, store: Store) -> JsonResponse | None:
    """429 for a new key beyond the tenant's rate, before anything is written; ``None``
    to go on. The bucket is asked first (Redis, cheap); only a refusal pays for the
    consistent read that tells a key already claimed or recorded, which is never refused:
    a client retrying an accepted pledge gets its original answer. Redis unreachable:
    admitted (fail open, logged and counted by ``intake_take``)."""
    take = intake_take(tenant=caller.tenant, rate_per_s=caller.rate_per_s, burst=caller.burst)
    if take is None or take.taken:
        return None
    if intake.pledge_key_known(store, tenant=caller.tenant, idempotency_key=key):
        return None
    INTAKE_RATE_LIMITED.labels(caller.tenant).inc()
    response = _error(
        429,
        "rate_limited",
        "Too many requests for this tenant; nothing was recorded. Retry after the "
        "Retry-After seconds.",
        intent_id=key,
    )
    response["Retry-After"] = str(take.retry_after_s)
    return response


def _actor(request: CorrelatedRequest, tenant: str) -> Actor:
    return Actor(
        username=f"api:{tenant}",
        role=Role.API,
        address=client_address(request) or "",
        correlation_id=request.correlation_id,  # CorrelationIdMiddleware's, as answered
    )


def _invalid(exc: InvalidRequest) -> JsonResponse:
    return _error(
        400, exc.code, "The request was rejected; nothing was recorded.", fields=exc.fields
    )


@dataclass(frozen=True)
class _Answer:
    """An answer of the intake API and what the request log keeps of it: the key (empty
    when refused before one was known), the outcome kind or error code, the donor ref
    once the body was read, the case opened."""

    response: JsonResponse
    outcome: str
    key: str = ""
    donor_ref: str = ""
    case_id: str = ""
    asked: PledgeRequest | None = None  # a key reused with another body: what it asked
    store: Store | None = None  # the key's home region, when the request got that far


def _record(request: CorrelatedRequest, tenant: str, answer: _Answer) -> None:
    """The intake request log's entry for ``answer``, in the key's home region (the
    tenant's requests without a key: the first region), with no round trip of its own: a
    201's entry was written by the commit that recorded the pledge; any other answer's is
    buffered and written off the request path (``intake_request_buffer``), so neither
    waits for nor fails on the log."""
    if answer.outcome == OutcomeKind.CREATED:
        return
    status = answer.response.status_code
    entry = intake_request_new(
        tenant=tenant,
        idempotency_key=answer.key,
        answer=IntakeAnswer(
            status=status,
            outcome=answer.outcome,
            rejected=400 <= status < 500,
            replayed=answer.outcome == OutcomeKind.REPLAYED,
            case_id=answer.case_id,
        ),
        correlation_id=getattr(request, "correlation_id", "") or "",
        donor_ref=answer.donor_ref,
        asked=answer.asked,
    )
    if answer.store is not None:
        store = answer.store
    else:
        store = pledge_home(tenant, answer.key) if answer.key else first_store()
    intake_request_buffer(entry, store=store)


@csrf_exempt
@require_http_methods(["POST"])
def pledge_create(request: CorrelatedRequest) -> JsonResponse:
    caller = _caller(request)
    if not isinstance(caller, Caller):
        return _unauthorized(caller)  # no tenant to log it under
    answer = _pledge_answer(request, caller)
    _record(request, caller.tenant, answer)
    return answer.response


def _pledge_answer(request: CorrelatedRequest, caller: Caller) -> _Answer:
    tenant, funds = caller.tenant, caller.funds
    key = ""
    try:
        key = parse_idempotency_key(request.headers.get("Idempotency-Key"))
        # The schema version (missing: the current one); unknown or malformed is a 400
        # before the body is read, and nothing is written.
        version = parse_pledge_version(request.headers.get(VERSION_HEADER))
        declared = request.META.get("CONTENT_LENGTH") or "0"
        if not declared.isdigit() or int(declared) > MAX_BODY_BYTES:
            # Refuse before reading: a large body never reaches memory.
            raise InvalidRequest({"body": f"larger than {MAX_BODY_BYTES} bytes"}, "body_too_large")
        body = parse_body(request.body)
    except InvalidRequest as exc:
        return _Answer(_invalid(exc), exc.code, key)
    # The key's home region, resolved once for every read and write of this request.
    store = pledge_home(tenant, key)
    limited = _rate_limited(caller, key, store)
    if limited is not None:
        return _Answer(limited, "rate_limited", key, body.donor_ref, store=store)
    try:
        # Only the tenant's registered funds (read with the token), up to each one's
        # largest single amount, refused before anything is written; but a key already
        # claimed or recorded gets its original answer even if the fund was removed or
        # its limit lowered since (the reads are made on this refusal path only).
        fund_check(body, funds)
    except InvalidRequest as exc:
        if not intake.pledge_key_known(store, tenant=tenant, idempotency_key=key):
            return _Answer(_invalid(exc), exc.code, key, body.donor_ref, store=store)
    outcome = intake.pledge_submit(
        store,
        tenant=tenant,
        idempotency_key=key,
        request=body,
        actor=_actor(request, tenant),
        terms=intake.ClaimTerms(version=version),
    )
    status = INTAKE[outcome.kind]
    if outcome.kind in (OutcomeKind.CREATED, OutcomeKind.REPLAYED):
        response = JsonResponse(outcome.pledge, status=status)
        if outcome.kind == OutcomeKind.REPLAYED:
            response["Idempotent-Replayed"] = "true"
    else:
        extra = {"intent_id": key}
        if outcome.case_id:
            extra["case_id"] = outcome.case_id
        response = _error(status, outcome.kind, outcome.detail, **extra)
    if outcome.retry_after:
        response["Retry-After"] = str(outcome.retry_after)
    if outcome.kind in (OutcomeKind.CREATED, OutcomeKind.OUTCOME_UNKNOWN, OutcomeKind.REPLAYED):
        response["Location"] = f"/api/v1/pledges/{quote(key, safe='')}"
    asked = body if outcome.kind == OutcomeKind.KEY_REUSED else None
    return _Answer(
        response, str(outcome.kind), key, body.donor_ref, outcome.case_id or "", asked, store
    )


@csrf_exempt
@require_safe
def pledge_detail(request: CorrelatedRequest, intent_id: str) -> JsonResponse:
    caller = _caller(request)
    if not isinstance(caller, Caller):
        return _unauthorized(caller)
    answer = _pledge_lookup(caller.tenant, intent_id)
    _record(request, caller.tenant, answer)
    return answer.response


def _pledge_lookup(tenant: str, intent_id: str) -> _Answer:
    try:
        key = parse_idempotency_key(intent_id)
    except InvalidRequest as exc:
        return _Answer(_invalid(exc), exc.code)
    store = pledge_home(tenant, key)
    try:
        pledge = intake.pledge_get(store, tenant=tenant, idempotency_key=key)
    except intake.StoreUnavailable:
        response = _error(
            INTAKE[OutcomeKind.UNAVAILABLE],
            OutcomeKind.UNAVAILABLE,
            "DynamoDB could not be reached; the outcome is unknown. Retry later.",
            intent_id=key,
        )
        response["Retry-After"] = str(retry_after_s())
        return _Answer(response, OutcomeKind.UNAVAILABLE, key, store=store)
    if pledge is None:
        missing = _error(404, "not_found", "No pledge is recorded under this key.", intent_id=key)
        return _Answer(missing, "not_found", key, store=store)
    donor_ref = str(pledge.get("donor_ref", ""))
    return _Answer(JsonResponse(pledge), "found", key, donor_ref, store=store)

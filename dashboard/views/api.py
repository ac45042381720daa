"""The intake API: ``POST /api/v1/pledges`` and ``GET /api/v1/pledges/<key>``.

Thin translation only: authenticate, parse, check the fund against the tenant's registered
funds, call one service, map its outcome to HTTP (docs/design.md §4 outcome table). Bearer
tokens map callers to tenants.
"""

from __future__ import annotations

from urllib.parse import quote

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_safe

from dashboard.auth import CorrelatedRequest, client_address
from dashboard.models import ApiToken
from dashboard.statuses import INTAKE
from reconciliation.actors import Actor, Role
from reconciliation.claims import intake
from reconciliation.claims.funds import Fund as FundRule
from reconciliation.claims.funds import fund_check
from reconciliation.claims.outcomes import OutcomeKind, retry_after_s
from reconciliation.claims.request import (
    MAX_BODY_BYTES,
    InvalidRequest,
    parse_body,
    parse_idempotency_key,
)


def _error(status: int, code: str, detail: str, **extra) -> JsonResponse:
    return JsonResponse({"error": code, "detail": detail, **extra}, status=status)


def _bearer(request: HttpRequest) -> str | None:
    scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
    return raw.strip() if scheme.lower() == "bearer" and raw.strip() else None


def _caller(request: HttpRequest) -> tuple[str, list[FundRule]] | None:
    """The tenant and its registered funds, in one query (``ApiToken.caller``)."""
    raw = _bearer(request)
    caller = ApiToken.caller(raw) if raw else None
    # Read by ServerTimingMiddleware: timings go to callers who proved who they are.
    request.api_tenant = caller[0] if caller else None  # type: ignore[attr-defined]
    return caller


def _tenant(request: HttpRequest) -> str | None:
    caller = _caller(request)
    return caller[0] if caller else None


def _unauthorized() -> JsonResponse:
    response = _error(401, "unauthorized", "A valid bearer token is required.")
    response["WWW-Authenticate"] = 'Bearer realm="pledges"'
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


@csrf_exempt
@require_http_methods(["POST"])
def pledge_create(request: CorrelatedRequest) -> JsonResponse:
    caller = _caller(request)
    if caller is None:
        return _unauthorized()
    tenant, funds = caller
    try:
        key = parse_idempotency_key(request.headers.get("Idempotency-Key"))
        declared = request.META.get("CONTENT_LENGTH") or "0"
        if not declared.isdigit() or int(declared) > MAX_BODY_BYTES:
            # Refuse before reading: a large body never reaches memory.
            raise InvalidRequest({"body": f"larger than {MAX_BODY_BYTES} bytes"}, "body_too_large")
        body = parse_body(request.body)
    except InvalidRequest as exc:
        return _invalid(exc)
    try:
        # Only the tenant's registered funds (read with the token), up to each one's
        # largest single amount, refused before anything is written; but a key already
        # claimed or recorded gets its original answer even if the fund was removed or
        # its limit lowered since (the reads are made on this refusal path only).
        fund_check(body, funds)
    except InvalidRequest as exc:
        if not intake.pledge_key_known(tenant=tenant, idempotency_key=key):
            return _invalid(exc)
    outcome = intake.pledge_submit(
        tenant=tenant, idempotency_key=key, request=body, actor=_actor(request, tenant)
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
    return response


@csrf_exempt
@require_safe
def pledge_detail(request: HttpRequest, intent_id: str) -> JsonResponse:
    tenant = _tenant(request)
    if tenant is None:
        return _unauthorized()
    try:
        key = parse_idempotency_key(intent_id)
    except InvalidRequest as exc:
        return _invalid(exc)
    try:
        pledge = intake.pledge_get(tenant=tenant, idempotency_key=key)
    except intake.StoreUnavailable:
        response = _error(
            INTAKE[OutcomeKind.UNAVAILABLE],
            OutcomeKind.UNAVAILABLE,
            "DynamoDB could not be reached; the outcome is unknown. Retry later.",
            intent_id=key,
        )
        response["Retry-After"] = str(retry_after_s())
        return response
    if pledge is None:
        return _error(404, "not_found", "No pledge is recorded under this key.", intent_id=key)
    return JsonResponse(pledge)

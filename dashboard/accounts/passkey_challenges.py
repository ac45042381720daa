"""The challenge a passkey sign-in answers, held in Redis rather than in a session
(docs/security.md, "Passkeys").

Every press of "Sign in with a passkey" asks for a challenge before anyone is signed
in. Kept in the session, each press would open an anonymous Django session: a row in
``django_session`` per press, never removed by anything we run, read and decoded by every
sessions list. Here the challenge's state is kept under a random id for
``CHALLENGE_TTL_S`` seconds (Redis expires it, so presses cannot pile up), the id rides
in a cookie scoped to the sign-in URLs, and the sign-in takes it with ``GETDEL``: spent
once, whatever the answer, even by two posts at the same moment.
"""

from __future__ import annotations

import json
import logging
import secrets
from typing import Any

import redis
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from dashboard.accounts.lockout import redis_client

logger = logging.getLogger(__name__)

CHALLENGE_TTL_S = 300
COOKIE = "passkey_challenge"
_PREFIX = "passkey-challenge:"


class ChallengeUnavailable(Exception):
    """Redis did not answer: no challenge can be kept (the page offers the code)."""


def challenge_keep(response: HttpResponse, state: dict[str, Any]) -> None:
    """Keep ``state`` for ``CHALLENGE_TTL_S`` seconds; its id goes in ``response``'s
    cookie. Raises :class:`ChallengeUnavailable` when Redis does not answer."""
    challenge_id = secrets.token_urlsafe(24)
    try:
        redis_client().set(_PREFIX + challenge_id, json.dumps(state), ex=CHALLENGE_TTL_S)
    except redis.RedisError as exc:
        logger.warning("passkey challenge: Redis unreachable (%s)", exc.__class__.__name__)
        raise ChallengeUnavailable from exc
    response.set_cookie(
        COOKIE,
        challenge_id,
        max_age=CHALLENGE_TTL_S,
        path=reverse("login"),
        secure=settings.SESSION_COOKIE_SECURE,
        httponly=True,
        samesite="Lax",
    )


def challenge_take(request: HttpRequest) -> dict[str, Any] | None:
    """The state of the challenge this browser was given, removed as it is read (so an
    answer is checked once); None when there is none, it expired, or Redis is down."""
    challenge_id = request.COOKIES.get(COOKIE, "")
    if not challenge_id or len(challenge_id) > 64:
        return None
    try:
        raw = redis_client().getdel(_PREFIX + challenge_id)
    except redis.RedisError as exc:
        logger.warning("passkey challenge: Redis unreachable (%s)", exc.__class__.__name__)
        return None
    return json.loads(raw) if raw else None

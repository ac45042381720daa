"""The sign-in lockout, counted before anything is checked (docs/security.md).

django-axes refuses a username+address pair once its recorded failures reach
``AXES_FAILURE_LIMIT``, but it checks the count first and records the failure after
the password has been checked: guesses sent at once all read the count before any of
them is recorded, and each one is checked. Here every attempt first takes a number from
one Redis counter per username+address (``INCR`` and its expiry in one Lua script, so
the number and the cool-off are one atomic step), and only the attempts numbered up to
the limit go on to the password and the code; the rest are refused unchecked. A
successful sign-in clears the counter, as it clears axes' record
(``AXES_RESET_ON_SUCCESS``), and ``axes_reset_username`` clears both.

Axes' database record is kept (the admin screen lists it, and it still refuses on its
own count), so with Redis unreachable sign-in falls back to that check, logged, rather
than locking every member of staff out.
"""

from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING, Any

import redis
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username, get_failure_limit
from django.conf import settings
from django.http import HttpRequest

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)

# Set on a request refused before any check: not a failure event of its own
# (dashboard/accounts/signin_audit.py).
REFUSED_UNCHECKED = "signin_refused_unchecked"
# Set on a request admitted to the checks: the number its attempt took. One attempt
# alone takes the number AXES_FAILURE_LIMIT, so one alone can write the lockout event.
ATTEMPT_NUMBER = "signin_attempt_number"

# One step: the attempt's number, and the cool-off restarted from this attempt (as axes
# restarts it on a failure during a lockout).
_TAKE = """
local n = redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[1])
return n
"""

_clients: dict[str, redis.Redis] = {}


def redis_client() -> redis.Redis:
    """The Redis of short-lived sign-in state (the lockout counters, passkey challenges)."""
    url = settings.REDIS_URL
    if url not in _clients:
        # Bounded like every Redis call on a request path (settings).
        _clients[url] = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
    return _clients[url]


def _key(username: str | None, address: str | None) -> str:
    # Hashed: a username typed into the form is not kept readable in Redis.
    who = hashlib.sha256((username or "").encode()).hexdigest()[:32]
    return f"{settings.SIGNIN_LOCKOUT_PREFIX}{who}:{address or '-'}"


def attempt_take(username: str | None, address: str | None) -> int | None:
    """This attempt's number since the counter was last cleared, or None when Redis does
    not answer."""
    seconds = max(1, int(settings.AXES_COOLOFF_TIME.total_seconds()))
    try:
        return int(redis_client().eval(_TAKE, 1, _key(username, address), seconds))
    except redis.RedisError as exc:
        logger.warning("sign-in lockout: Redis unreachable (%s)", exc.__class__.__name__)
        return None


def attempts_clear(*, username: str | None = None, address: str | None = None) -> int:
    """Clear the counters of ``username`` (any address), ``address`` (any username) or
    the one pair; returns how many were cleared."""
    who = hashlib.sha256(username.encode()).hexdigest()[:32] if username is not None else "*"
    pattern = f"{settings.SIGNIN_LOCKOUT_PREFIX}{who}:{address or '*'}"
    try:
        client = redis_client()
        keys = list(client.scan_iter(match=pattern, count=500))
        return int(client.delete(*keys)) if keys else 0
    except redis.RedisError as exc:
        logger.warning("sign-in lockout: Redis unreachable (%s)", exc.__class__.__name__)
        return 0


def password_check(
    user: User, password: str, *, address: str | None, refused: type[Exception], wrong: str
) -> None:
    """A form beyond sign-in that asks for ``user``'s password: the attempt takes its
    number first, as a sign-in does, so the form cannot be used to guess it. Raises
    ``refused`` past the limit (unchecked) or when the password is wrong (``wrong``
    says so). The caller clears the counter once every check it makes has passed."""
    number = attempt_take(user.get_username(), address)
    if number is not None and number > settings.AXES_FAILURE_LIMIT:
        raise refused("Too many failed attempts from this address: wait a while and try again.")
    if not user.check_password(password or ""):
        raise refused(wrong)


class AxesRequest(HttpRequest):
    """A request as axes' handler sees it, for the type checker only: AxesMiddleware
    reads ``axes_locked_out``; axes sets ``axes_ip_address``."""

    axes_locked_out: bool
    axes_ip_address: str | None


# django-axes ships no type information, so its handler is Any to mypy.
class AtomicLockoutHandler(AxesDatabaseHandler):  # type: ignore[misc]
    """``AXES_HANDLER``: axes' database handler, with the count taken first."""

    def is_allowed(self, request: AxesRequest, credentials: dict[str, Any] | None = None) -> bool:
        if not super().is_allowed(request, credentials):
            setattr(request, REFUSED_UNCHECKED, True)
            return False
        username = get_client_username(request, credentials)
        number = attempt_take(username, getattr(request, "axes_ip_address", None))
        if number is None:
            return True  # axes' own (recorded) count has just admitted it
        if number > get_failure_limit(request, credentials):
            request.axes_locked_out = True  # answered by AxesMiddleware's lockout page
            setattr(request, REFUSED_UNCHECKED, True)
            return False
        setattr(request, ATTEMPT_NUMBER, number)
        return True

    def user_logged_in(
        self, sender: type[User], request: HttpRequest, user: User, **kwargs: object
    ) -> None:
        super().user_logged_in(sender, request, user, **kwargs)
        if settings.AXES_RESET_ON_SUCCESS:
            attempts_clear(
                username=user.get_username(), address=getattr(request, "axes_ip_address", None)
            )

    def reset_attempts(
        self,
        *,
        ip_address: str | None = None,
        username: str | None = None,
        ip_or_username: bool = False,
    ) -> int:
        count: int = super().reset_attempts(
            ip_address=ip_address, username=username, ip_or_username=ip_or_username
        )
        if ip_or_username:
            cleared = attempts_clear(username=username) if username else 0
            cleared += attempts_clear(address=ip_address) if ip_address else 0
        else:
            cleared = attempts_clear(username=username, address=ip_address)
        return max(count, cleared)

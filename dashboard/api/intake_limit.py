"""The intake rate limit per tenant: a token bucket in Redis (docs/security.md).

One Lua script, run with EVALSHA (redis-py's ``Script`` loads it again after a Redis
restart), refills the tenant's bucket for the time elapsed, by Redis's own clock (every
web process sees the same time), and takes one token if there is one: the read, the
refill and the take are one atomic step, so concurrent requests never share a token. A
refused request takes nothing and learns how long until a token is there.

Redis unreachable: the limit fails open (the request is admitted, logged and counted in
``intake_rate_limit_unavailable_total``). The limit protects capacity, not correctness:
refusing every pledge because Redis is down would turn a Redis outage into an intake
outage, while the claim still makes each key's write happen once.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import redis
from django.conf import settings

from reconciliation.metrics import INTAKE_RATE_LIMIT_UNAVAILABLE

logger = logging.getLogger(__name__)

# KEYS[1]: the tenant's bucket; ARGV: rate (tokens/s), burst (bucket size).
# Returns {1, "0"} when a token was taken, {0, seconds until one is there} when not.
_TAKE = """
if redis.replicate_commands then redis.replicate_commands() end
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1]) or burst
local at = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local taken = 0
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
  taken = 1
else
  wait = (1 - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return {taken, tostring(wait)}
"""

_clients: dict[str, redis.Redis] = {}
_scripts: dict[str, redis.commands.core.Script] = {}


@dataclass(frozen=True)
class Take:
    """The bucket's answer: whether a token was taken, and if not the whole seconds
    until one is there (``Retry-After``, at least 1)."""

    taken: bool
    retry_after_s: int = 0


def _script() -> redis.commands.core.Script:
    url = settings.REDIS_URL
    if url not in _scripts:
        # Bounded like every Redis call on a request path (settings).
        _clients[url] = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
        _scripts[url] = _clients[url].register_script(_TAKE)
    return _scripts[url]


def intake_take(*, tenant: str, rate_per_s: float, burst: int) -> Take | None:
    """Take one token from ``tenant``'s bucket; ``None`` when Redis does not answer
    (the caller admits the request: fail open)."""
    key = f"{settings.INTAKE_RATE_LIMIT_PREFIX}{tenant}"
    try:
        taken, wait = _script()(keys=[key], args=[rate_per_s, burst])
    except redis.RedisError as exc:
        INTAKE_RATE_LIMIT_UNAVAILABLE.inc()
        logger.warning(
            "intake rate limit: Redis unreachable (%s); admitted unlimited",
            exc.__class__.__name__,
        )
        return None
    if int(taken):
        return Take(taken=True)
    return Take(taken=False, retry_after_s=max(1, math.ceil(float(wait))))

"""The retry schedule of a delivery: exponential backoff with jitter, over more than three
days, then the last attempt (docs/webhooks.md)."""

from __future__ import annotations

import random
from typing import Final

# Delay before attempt n+1 after attempt n failed (n = 1..len): 30 s doubling-ish up to a
# day, then daily. The nominal sum is 3 d 22 h 42 min; with every delay jittered down
# by the full JITTER it is still 3 d 3 h 46 min: never under three days.
RETRY_DELAYS_S: Final = (30, 120, 600, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600) + (86400,) * 3
# Each delay is multiplied by a factor in [1 - JITTER, 1 + JITTER], so endpoints that
# failed together are not retried in one burst.
JITTER: Final = 0.2
MAX_ATTEMPTS: Final = len(RETRY_DELAYS_S) + 1


def retry_delay_s(
    attempts: int, rng: random.Random | None = None, *, scale: float = 1.0
) -> int | None:
    """Seconds until the next attempt after ``attempts`` failed ones; ``None`` after the last.

    ``scale`` (``ACK_RETRY_SCALE``, 1 in production) multiplies every delay, so tests and
    the reliability run see the same attempts in seconds instead of days; a delay is
    never under a second (the schedule is kept in whole epoch seconds)."""
    if not scale > 0:
        raise ValueError(f"the retry scale must be above 0, not {scale!r}")
    if attempts < 1 or attempts >= MAX_ATTEMPTS:
        return None
    nominal = RETRY_DELAYS_S[attempts - 1]
    factor = 1 + (rng or random).uniform(-JITTER, JITTER)
    return max(1, round(nominal * factor * scale))

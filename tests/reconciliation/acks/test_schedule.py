"""The retry schedule: exponential backoff with jitter, over at least three days."""

from __future__ import annotations

import random

import pytest

from reconciliation.acks.schedule import JITTER, MAX_ATTEMPTS, RETRY_DELAYS_S, retry_delay_s


def test_the_schedule_spans_three_days_even_with_all_jitter_down():
    """Even with every delay jittered down by the full JITTER, the last attempt comes more
    than three days after the first."""
    assert sum(RETRY_DELAYS_S) * (1 - JITTER) >= 3 * 86400
    assert list(RETRY_DELAYS_S) == sorted(RETRY_DELAYS_S)


def test_delays_grow_are_jittered_and_end_after_the_last_attempt():
    """Each delay lies within JITTER of its nominal value; after the last attempt, none."""
    rng = random.Random(7)
    for attempts, nominal in enumerate(RETRY_DELAYS_S, start=1):
        delay = retry_delay_s(attempts, rng)
        assert delay is not None
        assert nominal * (1 - JITTER) - 1 <= delay <= nominal * (1 + JITTER) + 1
    assert retry_delay_s(MAX_ATTEMPTS, rng) is None
    spread = {retry_delay_s(1, random.Random(seed)) for seed in range(20)}
    assert len(spread) > 1


def test_the_scale_shrinks_every_delay_never_under_a_second():
    """``scale=0.01`` (the reliability run's ``ACK_RETRY_SCALE``): each delay is the
    nominal one times the scale, within the jitter, and never under a second; a scale of
    0 or below is refused (every attempt would come a second after the last)."""
    for attempts, nominal in enumerate(RETRY_DELAYS_S, start=1):
        delay = retry_delay_s(attempts, random.Random(attempts), scale=0.01)
        assert delay is not None
        assert (
            max(1, nominal * 0.01 * (1 - JITTER)) - 1
            <= delay
            <= max(1, nominal * 0.01 * (1 + JITTER) + 1)
        )
    assert retry_delay_s(1, random.Random(1), scale=0.01) == 1
    assert retry_delay_s(MAX_ATTEMPTS, scale=0.01) is None
    with pytest.raises(ValueError):
        retry_delay_s(1, scale=0)

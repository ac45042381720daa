"""The stored instant's shape: written by ``clock.iso``, read back by ``clock.parse_iso``."""

from datetime import UTC, datetime

import pytest

from reconciliation import clock


@pytest.mark.parametrize(
    "at",
    [
        datetime(2026, 12, 5, 13, 39, 3, 123456, tzinfo=UTC),
        datetime(2026, 1, 1, tzinfo=UTC),
        datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ],
)
def test_what_iso_writes_is_read_back_as_the_same_instant(at):
    assert clock.parse_iso(clock.iso(at)) == at
    assert clock.parse_iso(clock.iso(at)).tzinfo is not None


@pytest.mark.parametrize(
    "value",
    [
        "2026-12-05T13:39:03Z",  # no microseconds: iso never writes it
        "2026-12-05 13:39:03.123456Z",  # a space for the T
        "2026-12-05T13:39:03.123456+00:00",  # an offset for the Z
        "2026-12-05Tab:39:03.123456Z",  # its shape, not a time
    ],
)
def test_a_shape_iso_never_writes_is_refused(value):
    with pytest.raises(ValueError):
        clock.parse_iso(value)

"""Numbers given to a management command, checked as argparse reads them: a bad one is the
one-line usage error (``CommandError`` under ``call_command``), never a traceback later.

``float()`` reads ``nan``, ``inf`` and ``1e309`` (infinity) without complaint, and a NaN
compares false with every bound, so a check such as ``rate <= 0`` let one through (and
switched a limit off); ``int()`` reads any number of digits, which overflowed a database
column or a timedelta. Each numeric argument therefore names its own finite range.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

# More digits than any bound here has: int() of a long run of digits is slow, and past
# the interpreter's digit limit raises a message about that limit instead of ours.
MAX_DIGITS = 40


def finite_number(minimum: float, maximum: float) -> Callable[[str], float]:
    """``type=finite_number(0.001, 1e6)``: a finite number in the closed range."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(
                f"{text[:MAX_DIGITS]!r} is not a number from {minimum:g} to {maximum:g}"
            )
        return value

    return parse


def whole_number(minimum: int, maximum: int) -> Callable[[str], int]:
    """``type=whole_number(1, 64)``: an integer in the closed range."""

    def parse(text: str) -> int:
        try:
            value = int(text) if len(text) <= MAX_DIGITS else None
        except ValueError:
            value = None
        if value is None or not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(
                f"{text[:MAX_DIGITS]!r} is not a whole number from {minimum} to {maximum}"
            )
        return value

    return parse


# A random generator's seed: any integer works, but one past 64 bits is a typo.
seed_number = whole_number(-(2**63), 2**63 - 1)

"""Rows of a global secondary index as a background scan reads them.

An index is eventually consistent: a Query can return a row for an item that is being
written before the row holds every projected attribute. A scan that indexed such a row
(``item["hash"]``) failed its whole run with a ``KeyError``. A scan takes the rows that
carry what it needs and skips the others with a warning naming the row; the next cycle
reads the row whole.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reconciliation.dynamo.items import from_item

logger = logging.getLogger(__name__)

# A row is logged with its attributes (the keys and a few projected values), cut here.
ROW_TEXT_LIMIT = 300


@dataclass(frozen=True)
class IncompleteRow:
    """An index row read without attributes the reader needs."""

    index: str
    missing: tuple[str, ...]
    row: Mapping[str, Any]

    @property
    def key_text(self) -> str:
        """The row as ``name=value`` pairs, sorted by name, cut to a log line's length."""
        plain = from_item(self.row)
        text = " ".join(f"{name}={plain[name]}" for name in sorted(plain))
        return text[:ROW_TEXT_LIMIT] or "(no attributes)"

    def warn(self, consequence: str = "skipped; read again next cycle") -> None:
        logger.warning(
            "index %s: a row without %s (%s): %s",
            self.index,
            ", ".join(self.missing),
            self.key_text,
            consequence,
        )


def incomplete(
    row: Mapping[str, Any], needed: Sequence[str], *, index: str
) -> IncompleteRow | None:
    """The row's shortfall against ``needed``, or ``None`` when it has every attribute."""
    missing = tuple(name for name in needed if name not in row)
    return IncompleteRow(index, missing, row) if missing else None


def complete_rows(
    rows: Iterable[Mapping[str, Any]], needed: Sequence[str], *, index: str
) -> Iterator[Mapping[str, Any]]:
    """The rows that carry every attribute in ``needed``; each other one is logged as a
    warning and skipped."""
    for row in rows:
        shortfall = incomplete(row, needed, index=index)
        if shortfall is None:
            yield row
        else:
            shortfall.warn()

"""Reads of the audit trail (docs/design.md §7), one module per job:

- :mod:`.filters` — what a search or export selects, parsed and bounded;
- :mod:`.day_index` — the ``by_day`` reader that merges a day's shards in ``at_id``
  order, its cursor, and the fast decoding of raw items;
- :mod:`.search` — one page of the audit search, as rows with their chain status;
- :mod:`.chains` — hash-chain checks of a stream and of a subject's stored head;
- :mod:`.periods` — the index read for checkpoints and verification (period heads,
  days with events, the streams of a range).

The names below are re-exported so ``from reconciliation.audit.selectors import …``
keeps working; new code may import from the submodules.
"""

from reconciliation.audit.chains import (
    SUBJECT_KINDS,
    ChainStatus,
    SubjectHead,
    case_chain_status,
    chain_check,
    chain_statuses,
    stream_chain_status,
    subject_chain_status,
    subject_heads,
    subject_of,
)
from reconciliation.audit.day_index import (
    AT_ID_RE,
    EXPORT_PAGE_LIMIT,
    Cursor,
    CursorError,
    DayIndexReader,
    decode_event,
    decode_value,
)
from reconciliation.audit.filters import (
    EARLIEST_DAY,
    LATEST_DAY,
    SEARCH_MAX_DAYS,
    AuditFilters,
    FilterError,
    parse_bound,
)
from reconciliation.audit.periods import (
    RangeIndex,
    audit_day_has_events,
    audit_period_heads,
    audit_range_index,
    subjects_written,
)
from reconciliation.audit.search import (
    SEARCH_PAGE_SIZE,
    SEARCH_QUERY_BUDGET,
    AuditPage,
    AuditRow,
    audit_search,
)

__all__ = [
    "AT_ID_RE",
    "EARLIEST_DAY",
    "EXPORT_PAGE_LIMIT",
    "LATEST_DAY",
    "SEARCH_MAX_DAYS",
    "SEARCH_PAGE_SIZE",
    "SEARCH_QUERY_BUDGET",
    "SUBJECT_KINDS",
    "AuditFilters",
    "AuditPage",
    "AuditRow",
    "ChainStatus",
    "Cursor",
    "CursorError",
    "DayIndexReader",
    "FilterError",
    "RangeIndex",
    "SubjectHead",
    "audit_day_has_events",
    "audit_period_heads",
    "audit_range_index",
    "audit_search",
    "case_chain_status",
    "chain_check",
    "chain_statuses",
    "decode_event",
    "decode_value",
    "parse_bound",
    "stream_chain_status",
    "subject_chain_status",
    "subject_heads",
    "subject_of",
    "subjects_written",
]

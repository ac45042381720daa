"""The case a person opens next after recording a disposition ("Record and open the next
case", docs/notes-and-notifications.md): the first open case of the same queue in its
page order that is not the one just handled and that nobody else has taken."""

from __future__ import annotations

from collections.abc import Sequence

from reconciliation.cases.vocabulary import Queue
from reconciliation.casework.selectors import queue_page
from reconciliation.stores import Store

# Rows read to find one: the queue's first page. A queue whose first this many open cases
# are all taken by others sends the person back to the queue page instead.
LOOK_AHEAD = 25


def next_open_case(
    queue: Queue, *, after: str, username: str, stores: Sequence[Store]
) -> str | None:
    """The id of the next case to work in ``queue``, or ``None`` when none is left."""
    page = queue_page(queue, limit=LOOK_AHEAD, stores=stores)
    for row in page.rows:
        if row.case_id != after and row.assignee in (None, "", username):
            return row.case_id
    return None

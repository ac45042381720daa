"""What staff see of one pledge's acknowledgements (the pledge page's "Deliveries"):
each delivery as stored on the pledge item, per endpoint and event type, with the
``webhook-id`` its attempts carried. One consistent GetItem of the pledge item."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from reconciliation.acks.models import Delivery, DeliveryStatus, EventType, event_id
from reconciliation.acks.repository import AckRepository

if TYPE_CHECKING:
    from reconciliation.stores import Store


@dataclass(frozen=True)
class DeliveryRow:
    """One event to one endpoint, as the page shows it."""

    delivery: Delivery
    webhook_id: str

    @property
    def status(self) -> DeliveryStatus:
        return DeliveryStatus.read(self.delivery.status)

    @property
    def event(self) -> EventType:
        return EventType.read(self.delivery.event_type)

    @property
    def next_at(self) -> int | None:
        """When the next attempt is due (epoch seconds), while one is."""
        if self.delivery.settled or not self.delivery.next_at:
            return None
        return self.delivery.next_at


@dataclass(frozen=True)
class PledgeAcks:
    """The pledge's acknowledgement state: whether an attempt is due, and its deliveries
    (none yet until the dispatcher first takes the pledge)."""

    due_at: int | None
    rows: tuple[DeliveryRow, ...]


def pledge_acks(intent_id: str, *, store: Store) -> PledgeAcks | None:
    """The acknowledgements of the recorded pledge ``intent_id``; ``None`` with no pledge."""
    state = AckRepository(store).get(intent_id)
    if state is None:
        return None
    rows = tuple(
        DeliveryRow(d, event_id(intent_id, d.event_type))
        for _, d in sorted(state.deliveries.items())
    )
    return PledgeAcks(due_at=state.due_at, rows=rows)

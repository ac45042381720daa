"""``row|past_sla``: whether an open case has waited longer than its queue's SLA
(``QUEUE_SLA_HOURS``); the rule lives in reconciliation/casework/notifications.py."""

from __future__ import annotations

from django import template

from reconciliation import clock
from reconciliation.cases.vocabulary import CaseState, CaseType, queue_for
from reconciliation.casework.notifications import is_past_sla, sla_hours

register = template.Library()


@register.filter
def past_sla(row: object) -> bool:
    queue = queue_for(
        CaseType.read(getattr(row, "case_type", "")), CaseState.read(getattr(row, "state", ""))
    )
    if queue is None:
        return False
    return is_past_sla(queue, getattr(row, "opened_at", ""), hours=sla_hours(), now=clock.now())

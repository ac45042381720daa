"""Audit search and export filters: what a listing selects (a UTC range, an actor, an
action, a case, a pledge), parsed and bounded, and its DynamoDB FilterExpression.

A bad filter raises :class:`FilterError`, whose message says which filter and why.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from reconciliation import clock
from reconciliation.audit.models import SYSTEM_STREAM

SEARCH_MAX_DAYS = 366
# Bounds of a date filter: no event predates the system, and day arithmetic on a bound
# (the day before, the day after, a default week) must stay inside datetime's years 1-9999
# (year 1 raised OverflowError, in a request and in a background export's worker).
EARLIEST_DAY = date(2000, 1, 1)
LATEST_DAY = date(2999, 12, 31)


# An intent id is "{tenant}#{key}" (docs/design.md §3).
INTENT_SEPARATOR = "#"
# DynamoDB's IN takes at most 100 values.
MAX_INTENT_TENANTS = 100
# How ``as_dict`` lists ``intent_tenants`` (tenant names are slugs: no comma).
TENANT_LIST_SEPARATOR = ","


# How ``as_dict`` lists ``actor_spellings`` (neither a username nor an address holds one).
SPELLING_SEPARATOR = "\n"
# The stored spellings an actor filter matches, at most (DynamoDB's IN takes 100 values).
MAX_ACTOR_SPELLINGS = 50


def case_id_canonical(text: str) -> str:
    """A case id as stored, whatever letter case it was typed in: ``C-`` and the 16
    base32 characters upper case, a region suffix lower case (``case_id_for``). An id
    is a DynamoDB key and events store it as such; folding what was typed to that one
    form keeps the filter an exact match, where the stored id cannot be folded."""
    if len(text) >= 18 and text[:2].upper() == "C-":
        return "C-" + text[2:18].upper() + text[18:].lower()
    return text


class FilterError(ValueError):
    """A search or export filter is malformed; the message says which and why."""


def parse_bound(value: str, *, end: bool) -> datetime:
    """``YYYY-MM-DD`` (the whole day: from its first or to its last microsecond) or an
    ISO-8601 date-time with a zone (``Z`` or an offset), as an aware UTC datetime."""
    value = (value or "").strip()
    out_of_range = f"{value!r} is out of range: dates run from {EARLIEST_DAY} to {LATEST_DAY}"
    try:
        if len(value) == 10:
            day = date.fromisoformat(value)
            moment = datetime.combine(day, time.max if end else time.min, tzinfo=UTC)
        else:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise FilterError(f"{value!r} is not a date (YYYY-MM-DD) or an ISO date-time")
    if moment.tzinfo is None:
        raise FilterError(f"{value!r} has no time zone; add Z or an offset")
    try:
        moment = moment.astimezone(UTC)
    except OverflowError:  # an offset that moves 0001-01-01 or 9999-12-31 off the calendar
        raise FilterError(out_of_range) from None
    if not EARLIEST_DAY <= moment.date() <= LATEST_DAY:
        raise FilterError(out_of_range)
    return moment


@dataclass(frozen=True)
class FilterAsk:
    """The filters as someone asked for them, not yet parsed: the range's bounds and the
    text filters as typed (empty: no filter; an empty bound: see ``AuditFilters.build``),
    and whether to leave out the trail's own ``SYSTEM`` stream."""

    since: str = ""
    until: str = ""
    actor: str = ""
    action: str = ""
    case_id: str = ""
    intent_id: str = ""
    hide_system: bool = False


@dataclass(frozen=True)
class AuditFilters:
    """What a search or export selects. ``since``/``until`` are inclusive UTC bounds.

    ``actor`` is typed by the user and matches a username or an e-mail address in any
    letter case: events store the actor as spelt then, and a FilterExpression cannot
    fold case, so the filter matches the spellings the caller found
    (``actor_spellings``: the staff accounts whose username or address is the typed text
    in another case) besides the typed text and its lower case. ``case_id`` is folded to
    the one form case ids are stored in. ``hide_system`` leaves out the trail's own
    ``SYSTEM`` stream (signed checkpoints). ``performed_by`` is imposed by the server
    (finance staff see only their own events) and matches the username only.
    ``intent_id`` is the intent as stored (``tenant#key``) or the client's own key
    alone, which staff are told: a bare key
    matches ``{tenant}#{key}`` for each of ``intent_tenants`` (the tenants the system
    holds, given by the caller), as the case search does.
    """

    since: datetime
    until: datetime
    actor: str = ""
    action: str = ""
    case_id: str = ""
    intent_id: str = ""
    performed_by: str = ""
    intent_tenants: tuple[str, ...] = ()
    actor_spellings: tuple[str, ...] = ()
    hide_system: bool = False

    @classmethod
    def build(
        cls,
        ask: FilterAsk,
        *,
        performed_by: str = "",
        intent_tenants: Sequence[str] = (),
        actor_spellings: Sequence[str] = (),
        default_days: int = 7,
        max_days: int | None = SEARCH_MAX_DAYS,
    ) -> AuditFilters:
        """The filters ``ask`` describes, parsed and bounded; the rest is given by the
        caller, not typed (see the class)."""
        since_at, until_at = _range(
            ask.since, ask.until, default_days=default_days, max_days=max_days
        )
        for name, text in (("actor", ask.actor), ("action", ask.action), ("case id", ask.case_id)):
            if len(text) > 300:
                raise FilterError(f"{name} is too long")
        if len(ask.intent_id) > 600:
            raise FilterError("intent id is too long")
        intent_id = ask.intent_id.strip()
        tenants = _intent_tenants(intent_id, intent_tenants)
        actor = ask.actor.strip()
        spellings: tuple[str, ...] = ()
        if actor:
            found = {actor, actor.lower(), *(a for a in actor_spellings if a)}
            spellings = tuple(sorted(found))[:MAX_ACTOR_SPELLINGS]
        return cls(
            since=since_at,
            until=until_at,
            actor=actor,
            action=ask.action.strip(),
            case_id=case_id_canonical(ask.case_id.strip()),
            intent_id=intent_id,
            performed_by=performed_by,
            intent_tenants=tenants,
            actor_spellings=spellings,
            hide_system=ask.hide_system,
        )

    def intent_ids(self) -> tuple[str, ...]:
        """The stored intent ids the intent filter matches: itself, or a bare key under
        each of ``intent_tenants``."""
        if not self.intent_id:
            return ()
        if not self.intent_tenants:
            return (self.intent_id,)
        return tuple(f"{t}{INTENT_SEPARATOR}{self.intent_id}" for t in self.intent_tenants)

    def as_dict(self) -> dict[str, str]:
        """Plain values for audit events, manifests and cursors (empty filters left out)."""
        out = {"since": clock.iso(self.since), "until": clock.iso(self.until)}
        for name in ("actor", "action", "case_id", "intent_id", "performed_by"):
            value = getattr(self, name)
            if value:
                out[name] = value
        if self.intent_tenants:
            # The tenants a bare key was searched under, so an export made later from
            # these values (``filters_from_dict``) selects what the search showed.
            out["intent_tenants"] = TENANT_LIST_SEPARATOR.join(self.intent_tenants)
        if self.actor_spellings:
            out["actor_spellings"] = SPELLING_SEPARATOR.join(self.actor_spellings)
        if self.hide_system:
            out["hide_system"] = "yes"
        return out

    def fingerprint(self) -> str:
        blob = json.dumps(self.as_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def days(self, *, descending: bool = False) -> list[date]:
        first, last = self.since.date(), self.until.date()
        out = [first + timedelta(days=i) for i in range((last - first).days + 1)]
        return out[::-1] if descending else out

    def expression(self) -> tuple[str | None, dict[str, str], dict[str, dict[str, Any]]]:
        """FilterExpression, names and values for the non-key filters (None if none)."""
        parts: list[str] = []
        names: dict[str, str] = {}
        values: dict[str, dict[str, Any]] = {}
        if self.actor:
            names.update({"#actor": "actor", "#un": "username", "#em": "email"})
            spellings = self.actor_spellings or (self.actor,)
            for n, spelling in enumerate(spellings):
                values[f":actor{n}"] = {"S": spelling}
            listed = ", ".join(f":actor{n}" for n in range(len(spellings)))
            parts.append(f"(#actor.#un IN ({listed}) OR #actor.#em IN ({listed}))")
        if self.hide_system:
            names["#stream"] = "stream"
            values[":system"] = {"S": SYSTEM_STREAM}
            parts.append("#stream <> :system")
        if self.performed_by:
            names.update({"#actor": "actor", "#un": "username"})
            values[":me"] = {"S": self.performed_by}
            parts.append("#actor.#un = :me")
        # Equal to the value asked for: the event's attribute, and its placeholder's name.
        for attribute, placeholder, wanted in (
            ("action", "action", self.action),
            ("case_id", "case", self.case_id),
        ):
            if wanted:
                names[f"#{placeholder}"] = attribute
                values[f":{placeholder}"] = {"S": wanted}
                parts.append(f"#{placeholder} = :{placeholder}")
        intents = self.intent_ids()
        if len(intents) == 1:
            names["#intent"] = "intent_id"
            values[":intent"] = {"S": intents[0]}
            parts.append("#intent = :intent")
        elif intents:
            names["#intent"] = "intent_id"
            for n, intent in enumerate(intents):
                values[f":intent{n}"] = {"S": intent}
            parts.append(f"#intent IN ({', '.join(f':intent{n}' for n in range(len(intents)))})")
        return (" AND ".join(parts) or None), names, values


def _range(
    since: str, until: str, *, default_days: int, max_days: int | None
) -> tuple[datetime, datetime]:
    """The bounds typed (an empty ``until``: the end of today; an empty ``since``:
    ``default_days`` back from ``until``), refused when reversed or wider than
    ``max_days``."""
    today = clock.now().date()
    until_at = (
        parse_bound(until, end=True) if until else datetime.combine(today, time.max, tzinfo=UTC)
    )
    since_at = (
        parse_bound(since, end=False)
        if since
        else datetime.combine(
            until_at.date() - timedelta(days=default_days - 1), time.min, tzinfo=UTC
        )
    )
    if since_at > until_at:
        raise FilterError("the range starts after it ends")
    span = (until_at.date() - since_at.date()).days + 1
    if max_days is not None and span > max_days:
        raise FilterError(f"the range covers {span} days; at most {max_days} at a time")
    return since_at, until_at


def _intent_tenants(intent_id: str, intent_tenants: Sequence[str]) -> tuple[str, ...]:
    """The tenants a bare key (no ``tenant#``) is searched under; none for a full id."""
    if not intent_id or INTENT_SEPARATOR in intent_id:
        return ()
    tenants = tuple(sorted({t for t in intent_tenants if t}))
    if not tenants:
        raise FilterError(
            "intent id: no tenant is known to search the key under; enter it as tenant#key"
        )
    if len(tenants) > MAX_INTENT_TENANTS:
        raise FilterError(
            f"intent id: a key alone is searched under at most {MAX_INTENT_TENANTS} "
            "tenants; enter it as tenant#key"
        )
    return tenants

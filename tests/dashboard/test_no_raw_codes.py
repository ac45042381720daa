"""No page shows a raw code: every staff page, for each role, is read as a
person reads it — its text, outside ``<code>`` elements — and must hold no stored value of
a vocabulary enum (``RESOLVED``, ``DUPLICATE_REJECTED_OK``, ``case_opened``) and no
``#``-joined key (``acme#order-1``, ``CASE#C-…``). Labels are what ``Code.label`` says.

One world, built once through the real write paths, serves every role's walk."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from html.parser import HTMLParser

import pytest
from django.test import Client

from reconciliation.codes import _REGISTRY
from tests.helpers import sign_in
from tests.reconciliation.factories import ambiguous_case, key_reuse_case, stuck_case

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]

HX = {"HTTP_HX_REQUEST": "true"}
WHY = {"reason_code": "EVIDENCE_CONFIRMS", "reason_text": "Checked the consistent reads."}


def code_values() -> frozenset[str]:
    """Stored values that read as codes, not words: with an underscore, or in capitals
    (``OPEN``); a lower-case single word (``queued``) may be plain English."""
    return frozenset(
        str(member)
        for enum in _REGISTRY
        for member in enum
        if "_" in member or (member.isupper() and len(member) >= 3)
    )


CODES = code_values()
CODE_RE = re.compile(
    r"(?<![\w-])(" + "|".join(sorted(map(re.escape, CODES), key=len, reverse=True)) + r")(?![\w-])"
)
KEY_RE = re.compile(r"[\w.-]+#[\w.#-]+")


class VisibleText(HTMLParser):
    """The text a person sees: no ``<code>``, ``<script>``, ``<style>`` or ``<template>``
    content, no attributes."""

    HIDDEN = {"code", "script", "style", "template", "kbd", "samp"}

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.HIDDEN:
            self.depth += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in self.HIDDEN and self.depth:
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if not self.depth:
            self.parts.append(data)


def raw_codes(html: str) -> list[str]:
    parser = VisibleText()
    parser.feed(html)
    text = " ".join(parser.parts)
    found = [m.group(1) for m in CODE_RE.finditer(text)]
    found += [m.group(0) for m in KEY_RE.finditer(text)]
    return found


def test_the_checker_finds_a_raw_code_and_a_key_and_ignores_code_elements():
    """The checker itself: it must see what it exists to catch."""
    assert raw_codes("<p>Now: RESOLVED</p>") == ["RESOLVED"]
    assert raw_codes("<td>Bulk DUPLICATE_REJECTED_OK done</td>") == ["DUPLICATE_REJECTED_OK"]
    assert raw_codes("<td>acme#order-1</td>") == ["acme#order-1"]
    assert raw_codes("<p>case_opened</p>") == ["case_opened"]
    assert raw_codes("<p>Resolved <code>acme#order-1</code> <code>RESOLVED</code></p>") == []
    assert raw_codes('<option value="RESOLVED">Resolved</option>') == []
    assert raw_codes("<p>Open cases and resolved ones</p>") == []


@dataclass(frozen=True)
class World:
    stuck: str
    ambiguous: str
    cancelled: str
    resolved: str
    keys: tuple[str, ...] = ()  # the client keys (tenant acme) of the four cases


@pytest.fixture
def world(ddb) -> World:
    tag = uuid.uuid4().hex[:6]
    stuck = stuck_case(f"raw-stuck-{tag}")
    ambiguous = ambiguous_case(f"raw-amb-{tag}")
    cancelled = key_reuse_case(ddb, f"raw-reuse-{tag}")
    resolved = stuck_case(f"raw-done-{tag}")
    staff = Client()
    sign_in(staff, "finance_staff", username="raw-staff")
    answer = staff.post(
        f"/cases/{resolved.case_id}/dispose/",
        {
            "seen_version": resolved.version,
            "action_id": str(uuid.uuid4()),
            "disposition": "ESCALATE",
            **WHY,
        },
    )
    assert answer.status_code == 302
    keys = tuple(f"raw-{kind}-{tag}" for kind in ("stuck", "amb", "reuse", "done"))
    return World(stuck.case_id, ambiguous.case_id, cancelled.case_id, resolved.case_id, keys)


def pages(world: World) -> list[str]:
    return [
        "/",
        "/worklist/",
        "/notifications/",
        "/queues/stuck/",
        "/queues/ambiguous/",
        "/queues/cancelled/",
        "/queues/escalated/",
        "/queues/mine/",
        "/queues/resolved/",
        "/cases/?q=acme",
        f"/cases/{world.stuck}/",
        f"/cases/{world.ambiguous}/",
        f"/cases/{world.cancelled}/",
        f"/cases/{world.resolved}/",
        "/approvals/",
        "/audit/",
        "/audit/exports/",
        "/accounts/profile/",
        *(f"/pledges/acme/{key}/" for key in world.keys),
        f"/cases/?q=acme%23{world.keys[1]}",
    ]


@pytest.mark.parametrize("role", ["finance_staff", "supervisor", "auditor"])
def test_no_page_shows_a_raw_code_or_key(world, role):
    client = Client()
    sign_in(client, role, username=f"raw-{role}")
    shown: dict[str, list[str]] = {}
    for path in pages(world):
        answer = client.get(path)
        if answer.status_code == 403:
            continue
        assert answer.status_code == 200, path
        found = raw_codes(answer.content.decode())
        if found:
            shown[path] = sorted(set(found))
    assert shown == {}, "\n".join(f"{p}: {v[:6]}" for p, v in shown.items())

"""No sentence on a staff page ends twice: the text a person reads, on every page for
each role, holds no ".." (an ellipsis, "...", aside). A template that puts a period
after a value already ending in one, or a literal "..", shows up here."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from tests.dashboard.test_no_raw_codes import VisibleText, pages, world  # noqa: F401
from tests.helpers import sign_in

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]

DOUBLE_STOP = re.compile(r"(?<![.])\.\s*\.(?![.])")


def double_stops(html: str) -> list[str]:
    """Each ".." of the visible text, with a little of the text before it."""
    parser = VisibleText()
    parser.feed(html)
    text = re.sub(r"\s+", " ", " ".join(parser.parts))
    return [text[max(0, m.start() - 40) : m.end()] for m in DOUBLE_STOP.finditer(text)]


def test_the_checker_finds_a_double_stop_and_spares_an_ellipsis():
    """The checker itself: ".." and ". ." are found, "..." and "…" are not."""
    assert double_stops("<p>oldest first..</p>") == ["oldest first.."]
    assert double_stops("<p>It ended. <a>x</a>.</p>") == []
    assert double_stops("<p>Changed by system.</p>.") == ["Changed by system. ."]
    assert double_stops("<p>Loading... and … done.</p>") == []


@pytest.mark.parametrize("role", ["finance_staff", "supervisor", "auditor"])
def test_no_page_shows_a_double_period(world, role):  # noqa: F811
    """Every page each role may open, its text as a person reads it."""
    client = Client()
    sign_in(client, role, username=f"stops-{role}")
    shown: dict[str, list[str]] = {}
    for path in [*pages(world), "/accounts/staff/", "/queues/approval/", "/requests/rejected/"]:
        answer = client.get(path)
        if answer.status_code in (403, 404):
            continue
        assert answer.status_code == 200, path
        found = double_stops(answer.content.decode())
        if found:
            shown[path] = found
    assert shown == {}, "\n".join(f"{p}: {v[:3]}" for p, v in shown.items())

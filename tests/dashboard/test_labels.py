"""Pages speak words, not codes: every staff page, as each role, over
cases of every type and state, shows no stored code (a case state, queue, disposition,
audit action, cancellation reason, error kind…) as visible text, and no ISO timestamp
with microseconds. Attributes may hold codes (``value=``, ``datetime=``, ``title=``), and
so may the collapsed "Technical detail" blocks kept for the expert."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from zoneinfo import ZoneInfo

import pytest
from django.test import Client

from dashboard.templatetags import dashboard_format
from reconciliation.actors import Role
from reconciliation.audit.models import AuditAction
from reconciliation.cases.vocabulary import (
    CaseState,
    CaseType,
    Disposition,
    ErrorKind,
    Override,
    Queue,
    ReasonCode,
    RetryStatus,
)
from reconciliation.casework.dispositions import case_dispose
from reconciliation.casework.overrides import override_request
from reconciliation.claims.models import ClaimStatus, PledgeStatus
from reconciliation.claims.outcomes import OutcomeKind
from reconciliation.codes import Code
from reconciliation.dynamo.cancellation import Branch, CancellationCode
from reconciliation.dynamo.errors import ErrorCode
from tests.conftest import pledge_body
from tests.helpers import acting, client_as, sign_in, token_spent_elsewhere
from tests.reconciliation.factories import ambiguous_case, key_reuse_case, stuck_case, submit

pytestmark = [pytest.mark.django_db, pytest.mark.engines("dynamodb_local")]

ENUMS: tuple[type[Code], ...] = (
    CaseType,
    CaseState,
    Queue,
    Disposition,
    Override,
    ReasonCode,
    AuditAction,
    ClaimStatus,
    PledgeStatus,
    OutcomeKind,
    RetryStatus,
    CancellationCode,
    Branch,
    Role,
    ErrorKind,
    ErrorCode,
)
# Codes stored somewhere that no enum above names (none left).
EXTRA_CODES: tuple[str, ...] = ()
WHY = {"reason_code": "NEEDS_REVIEW", "reason_text": "Labels test reason text."}
MICROSECONDS = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}\.\d+")


def looks_like_code(value: str) -> bool:
    """A code a reader would not take for a word: SHOUTING, snake_case or CamelCase.
    Plain lowercase words that are also codes (``created``, ``duplicate``) are English."""
    return (
        "_" in value
        or (value.isupper() and len(value) > 1)
        or re.fullmatch(r"[A-Z][a-z]+(?:[A-Z][a-z]+)+", value) is not None
    )


CODES = sorted(
    {str(m) for enum in ENUMS for m in enum if looks_like_code(str(m))} | set(EXTRA_CODES)
)
CODE_RE = re.compile(r"(?<![\w#])(" + "|".join(map(re.escape, CODES)) + r")(?![\w#])")


class VisibleText(HTMLParser):
    """The text a reader sees: no tags, no attributes, no script or style, and nothing
    inside an element of class ``technical`` (the expert's collapsed detail)."""

    SKIP = {"script", "style", "template", "title"}
    VOID = {"br", "hr", "img", "input", "meta", "link", "source", "wbr", "col", "area"}

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.stack: list[bool] = []  # per open element: whether it hides its content

    def handle_starttag(self, tag, attrs):
        if tag in self.VOID:
            return
        classes = (dict(attrs).get("class") or "").split()
        self.stack.append(tag in self.SKIP or "technical" in classes)

    def handle_endtag(self, tag):
        if tag in self.VOID or not self.stack:
            return
        self.stack.pop()

    def handle_data(self, data):
        if not any(self.stack):
            self.parts.append(data)


def visible_text(html: str) -> str:
    parser = VisibleText()
    parser.feed(html)
    return " ".join(" ".join(parser.parts).split())


def _reuse_foreign_token(ddb, key: str):
    """A TOKEN_MISMATCH case: the commit goes out under a token another transaction used."""
    with token_spent_elsewhere(ddb):
        return submit(key).case_id


def seed_every_kind(ddb, settings) -> list[str]:
    """Cases of every type, and in every state, with retries, overrides and conflicts."""
    settings.AUTO_RESOLVE_COMMITTED = False
    ada = acting("ada")
    ids = []
    open_stuck = stuck_case("lb-stuck")
    ids.append(open_stuck.case_id)
    escalated = stuck_case("lb-escalated")
    case_dispose(disposition="ESCALATE", **ada.on(escalated, **WHY))
    ids.append(escalated.case_id)
    awaiting = stuck_case("lb-awaiting")
    override_request(override="RELEASE_CLAIM", **ada.on(awaiting, action_id="req", **WHY))
    ids.append(awaiting.case_id)
    retried = stuck_case("lb-retried")
    case_dispose(disposition="RETRY_COMMIT", **ada.on(retried, **WHY))
    ids.append(retried.case_id)
    ambiguous = ambiguous_case("lb-ambiguous")
    ids.append(ambiguous.case_id)
    confirmed = ambiguous_case("lb-confirmed")
    case_dispose(disposition="CONFIRMED_COMMITTED", **ada.on(confirmed, **WHY))
    ids.append(confirmed.case_id)
    ids.append(key_reuse_case(ddb, "lb-reuse").case_id)
    ids.append(_reuse_foreign_token(ddb, "lb-token"))
    submit("lb-fine", **{k: v for k, v in pledge_body().items() if k == "amount"})
    return ids


def pages(case_ids: list[str]) -> list[str]:
    paths = [
        "/",
        *(f"/queues/{slug}/" for slug in ("stuck", "ambiguous", "cancelled", "mismatch")),
        *(f"/queues/{slug}/" for slug in ("escalated", "approval", "resolved", "mine")),
        "/cases/?q=lb-stuck",
        "/cases/?q=D-1001",
        "/approvals/",
        "/audit/",
        "/audit/exports/",
        "/drill/",
        "/accounts/profile/",
        "/accounts/staff/",
    ]
    for case_id in case_ids:
        paths += [f"/cases/{case_id}/", f"/cases/{case_id}/evidence/"]
        paths.append(f"/audit/?case_id={case_id}")
    return paths


def signed_in(role: str) -> Client:
    """``role``'s client, its user named as no code is (``lb-finance``)."""
    return client_as(role, f"lb-{role.split('_')[0]}")


def test_no_raw_code_or_microsecond_timestamp_reaches_a_page(ddb, settings):
    """Every page each role can open, over cases of every type and state, shows words:
    no stored code and no microsecond timestamp is visible text."""
    case_ids = seed_every_kind(ddb, settings)
    seen, leaks = 0, []
    for role in ("finance_staff", "supervisor", "auditor"):
        client = signed_in(role)
        for path in pages(case_ids):
            response = client.get(path)
            assert response.status_code in (200, 403, 404), (role, path, response.status_code)
            if response.status_code != 200:
                continue
            seen += 1
            text = visible_text(response.content.decode())
            codes = sorted(set(CODE_RE.findall(text)))
            stamps = MICROSECONDS.findall(text)
            if codes or stamps:
                leaks.append(f"{role} {path}: {codes} {stamps[:2]}")
    assert seen >= 3 * 24
    assert not leaks, "\n".join(leaks)


def test_every_code_has_words_and_no_label_is_itself_a_code():
    """Each member of each code enum carries a label that is not the raw code and holds
    no other code, so ``words`` never falls back to the stored string."""
    for enum in ENUMS:
        for member in enum:
            assert member.label and member.label != str(member), member
            assert not CODE_RE.search(member.label), (member, member.label)
            assert not CODE_RE.search(member.help), (member, member.help)
            assert dashboard_format.words(str(member))


def test_times_show_in_the_zone_with_the_utc_instant_in_the_title(settings):
    """A stored instant renders as a <time> in the active zone, without microseconds,
    with its exact UTC instant in the title and the datetime attribute."""
    from django.utils import timezone

    with timezone.override(ZoneInfo("Europe/Berlin")):
        html = dashboard_format.when("2025-11-29T23:23:48.123456Z")
        exact = dashboard_format.when_exact("2025-11-29T23:23:48.123456Z")
    assert html == (
        '<time datetime="2025-11-29T23:23:48.123456Z" title="2025-11-29 23:23:48 UTC">'
        "30 Nov 2025, 00:23 CET</time>"
    )
    assert "2025-11-29 23:23:48 UTC" in visible_text(exact)
    assert "30 Nov 2025, 00:23 CET" in visible_text(exact)
    with timezone.override(ZoneInfo("UTC")):
        assert visible_text(dashboard_format.when_exact("2025-11-29T23:23:48Z")) == (
            "29 Nov 2025, 23:23:48 UTC"
        )
    assert dashboard_format.when("not a time") == ""
    assert dashboard_format.when(None) == ""


def test_profile_time_zone_is_validated_saved_and_applied(client):
    """A zone the database does not know is refused (400, nothing saved); a known one is
    saved on the profile and every later page shows times in it."""
    from dashboard.accounts.models import StaffProfile

    user = sign_in(client)
    for bad in ("Mars/Olympus_Mons", "", "x" * 5000, "../../etc/passwd"):
        refused = client.post("/accounts/profile/time-zone/", {"time_zone": bad})
        assert refused.status_code == 400
        assert 'role="alert"' in refused.content.decode()
    assert not StaffProfile.objects.filter(user=user).exists()

    saved = client.post("/accounts/profile/time-zone/", {"time_zone": "Europe/Berlin"})
    assert saved.status_code == 200
    assert "Times now show in Europe/Berlin." in saved.content.decode()
    assert StaffProfile.objects.get(user=user).time_zone == "Europe/Berlin"
    page = client.get("/accounts/profile/").content.decode()
    assert '<option value="Europe/Berlin" selected>' in page
    assert re.search(
        r"<dd>Europe/Berlin <span class=\"muted\">· now <time [^>]*>[^<]* CES?T</time>", page
    )


def test_a_code_is_found_in_whichever_enum_declares_it():
    """``find_code`` looks a stored string up across every code enum; the page filters use
    it for codes that no specific filter names."""
    from reconciliation.codes import find_code

    assert find_code("worker_died_between_claim_and_commit") is not None
    assert find_code("TransactionConflict").label == "Conflict with another request"
    assert find_code("nothing-like-a-code") is None
    assert dashboard_format.words("nothing-like-a-code") == "nothing-like-a-code"
    assert dashboard_format.words(None) == ""
    assert dashboard_format.explain("RETRY_COMMIT").startswith("Re-run the commit")

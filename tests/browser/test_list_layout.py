"""Lists, filters, words and the pledge page's claim card as a new user meets them, with
data as long as real data gets (donor refs of a CRM, 36-character UUID keys, long
usernames, case ids tagged with their second region):

- at 1280 px no list scrolls sideways (every column, Assignee and Last actor included,
  is inside its box) and no id breaks over lines: an id is one line, cut with an
  ellipsis when its column is narrower, its whole value in the title and in the copy;
- at 390 px the worklist's filters fold under "Filters", so the first case shows in the
  first screen; they are unfolded when one is set;
- at 390 px no word breaks mid-word (nothing is hyphenated);
- the pledge page names the claim's expiry for what it is (a completed claim's replay
  window, not a lease) and the line stays inside its card at 1280 px."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from reconciliation import clock
from reconciliation.actors import command_actor
from reconciliation.casework.dispositions import case_assign, case_dispose
from reconciliation.casework.overrides import override_request
from reconciliation.casework.sweeps import sweep_all
from reconciliation.claims.models import OPERATION_CREATE_PLEDGE, claim_pk
from reconciliation.claims.outcomes import OutcomeKind
from reconciliation.dynamo.client import dynamodb_client, home_region
from reconciliation.stores import every_store, home_store
from tests import fault_helpers
from tests.browser.conftest import PASSWORD, WIDE
from tests.helpers import acting, staff_user
from tests.reconciliation.factories import crashed_claim, stuck_case, submit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = 390
# A finance clerk and a supervisor with the long names a directory gives them.
CLERK = "christopher.vandenberghe-okafor"
SUPERVISOR = "alexandra.konstantinopoulou"
# A donor ref as a CRM exports it (64 characters is the most the API takes).
DONOR = "CRM-0042-7781:BERLIN-HQ.GIFTAID-2026-000184467"
QUEUES = (
    "stuck",
    "ambiguous",
    "cancelled",
    "mismatch",
    "drift",
    "undelivered",
    "escalated",
    "approval",
)
# The columns whose cells are ids (a case id, a donor ref, a client's key, an intent id,
# a webhook id): staff copy them, so none may break over lines.
ID_COLUMNS = ("Case", "Case id", "Intent id", "Donor ref", "Client key", "Pledge", "Webhook id")
WHY = {"reason_code": "NEEDS_REVIEW", "reason_text": "A closer look at a long key."}


def key_homed(region_name: str, make) -> str:
    """A key of tenant acme, from ``make()``, whose home is ``region_name``."""
    while True:
        key = make()
        if home_region(claim_pk("acme", OPERATION_CREATE_PLEDGE, key)).name == region_name:
            return key


def uuid_key() -> str:
    return str(uuid.uuid4())  # 36 characters, as most clients send


def long_key() -> str:
    return f"checkout-2026-12-03T14:05:09Z-web-order-{uuid.uuid4().hex[:12]}"


def open_stuck(region: str, make, *, age_h: int, **body) -> str:
    """A STUCK_PENDING case homed in ``region``, opened ``age_h`` hours ago."""
    key = key_homed(region, make)
    with clock.travel(-age_h * 3600 - 200):
        crashed_claim(key, **body)
    with clock.travel(-age_h * 3600):
        [case_id] = sweep_all(every_store(), home=home_store).opened
    return case_id


def cancelled_case(two_regions, region: str) -> str:
    """A CANCELLED_TRANSACTION case: the claim gone (TTL) and the key back with another
    body, which the durable pledge key refuses; its id."""
    key = key_homed(region, uuid_key)
    pk = claim_pk("acme", OPERATION_CREATE_PLEDGE, key)
    assert submit(key, donor_ref=DONOR).kind == OutcomeKind.CREATED
    dynamodb_client(home_region(pk)).delete_item(
        TableName=two_regions.idempotency_keys, Key={"pk": {"S": pk}}
    )
    outcome = submit(key, donor_ref=DONOR, amount="99.00")
    assert outcome.case_id
    return outcome.case_id


def two_region_world(two_regions, staff_users) -> None:
    """Open cases in both regions with long keys and refs, some (a cancelled one too)
    assigned to the clerk by the supervisor (long names in Assignee and Last actor), one
    escalated, one awaiting approval, one resolved, one ambiguous; an endpoint with
    attempts."""
    for name, role in ((CLERK, "finance_staff"), (SUPERVISOR, "supervisor")):
        staff_user(name, role, password=PASSWORD)
    staff_users[CLERK] = "finance_staff"
    ids = []
    for n, region in enumerate(["us-east-1", "eu-west-1"] * 4):
        make = uuid_key if n % 2 else long_key
        ids.append(open_stuck(region, make, age_h=30 - n, amount="1234567.89", donor_ref=DONOR))
    ids.append(cancelled_case(two_regions, "eu-west-1"))
    boss = acting(SUPERVISOR, "supervisor")
    for case_id in (*ids[:4], ids[-1]):
        case_assign(assignee=CLERK, **boss.on_id(case_id, seen_version=1))
    clerk = acting(CLERK)
    case_dispose(disposition="ESCALATE", **clerk.on_id(ids[4], seen_version=1, **WHY))
    override_request(
        override="RELEASE_CLAIM",
        **clerk.on_id(
            ids[5],
            reason_code="CLIENT_CONFIRMED",
            reason_text="The client says the request never reached them.",
            seen_version=1,
        ),
    )
    case_dispose(
        disposition="RETRY_COMMIT",
        **clerk.on_id(
            ids[6],
            reason_code="TRANSIENT_FAILURE",
            reason_text="The worker died before committing; retry it.",
            seen_version=1,
        ),
    )
    with fault_helpers.injected({"ambiguous_after_commit": 1.0}):
        submit(key_homed("eu-west-1", uuid_key), donor_ref=DONOR)
    attempts_logged()


def attempts_logged() -> int:
    """An endpoint with a long URL and a failed attempt per pledge key; its id."""
    from dashboard.tenancy.models import DeliveryAttempt
    from dashboard.tenancy.tenant_changes import webhook_register
    from reconciliation.acks.models import event_id

    endpoint = webhook_register(
        "acme",
        "https://hooks.finance.example-charity.org/pledges/acknowledgements/v2/receive",
        events=("pledge.recorded",),
        actor=command_actor("t"),
    )
    now = timezone.now()
    for n in range(3):
        intent_id = f"acme#{uuid_key() if n % 2 else long_key()}"
        DeliveryAttempt.objects.create(
            endpoint=endpoint,
            tenant="acme",
            intent_id=intent_id,
            event_type="pledge.recorded",
            webhook_id=event_id(intent_id, "pledge.recorded"),
            at=now - timedelta(minutes=n + 1),
            error="connect timeout after 10 s",
            duration_ms=10012.0,
            ok=False,
        )
    return endpoint.pk


def fits(page, path: str) -> None:
    """Neither the page nor any table scrolls sideways: every column is in view."""
    scroll, client = page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert scroll <= client, f"{path}: {scroll} px wide in a {client} px window"
    for inner, box in page.evaluate(
        "[...document.querySelectorAll('.table-wrap')].map(w => [w.scrollWidth, w.clientWidth])"
    ):
        assert inner <= box, f"{path}: a table {inner} px wide in its {box} px box"


# Each id cell of every table: its text, the height of its text and its line height,
# and, when the id is cut short, whether its whole value is in a title.
ID_CELLS = """columns => [...document.querySelectorAll('table')].flatMap(table => {
  const heads = [...table.querySelectorAll('thead th')].map(th => th.innerText.trim());
  const wanted = heads.map((h, i) => columns.includes(h) ? i + 1 : 0).filter(Boolean);
  return [...table.querySelectorAll('tbody tr')].flatMap(tr => wanted.map(i => {
    const cell = tr.querySelector(`:scope > :nth-child(${i})`);
    if (!cell || cell.colSpan > 1) return null;
    const range = document.createRange();
    range.selectNodeContents(cell);
    const text = cell.textContent.replace(/\\s+/g, ' ').trim();
    const cut = [cell, ...cell.querySelectorAll('*')].filter(
      e => e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX !== 'visible');
    const titled = cut.every(e => {
      const holder = e.closest('[title]');
      return holder !== null && cell.contains(holder)
        && holder.title.includes(e.textContent.trim());
    });
    return {text, height: range.getBoundingClientRect().height,
            line: parseFloat(getComputedStyle(cell).lineHeight), cut: cut.length, titled};
  })).filter(Boolean);
})"""


def ids_on_one_line(page, path: str) -> int:
    """Every id cell's text is one line; a cut id has its whole value in a title. The
    number of id cells looked at."""
    cells = page.evaluate(ID_CELLS, list(ID_COLUMNS))
    for cell in cells:
        assert cell["height"] < 1.5 * cell["line"], (
            f"{path}: id {cell['text']!r} takes {cell['height']:.0f} px "
            f"(a line is {cell['line']:.0f})"
        )
        assert cell["titled"], f"{path}: id {cell['text']!r} is cut short with no title"
    return len(cells)


def slug(path: str) -> str:
    """A page's path as a picture's file name."""
    return "".join(c if c.isalnum() else "-" for c in path.strip("/?")) or "overview"


def test_every_list_fits_1280_with_each_id_on_one_line(
    two_regions, open_browser, live_server, staff_users, screenshots
):
    """At 1280 px, with cases in two regions, 36-character and longer keys, a 46-character
    donor ref and 27- to 31-character usernames: the worklist, each queue, resolved, my
    cases, the search results, the acknowledgements list and an endpoint's attempts are
    no wider than the window, every table fits its box, and every id is on one line."""
    two_region_world(two_regions, staff_users)
    from dashboard.tenancy.models import WebhookEndpoint

    endpoint = WebhookEndpoint.objects.get().pk
    pages = (
        "/worklist/",
        *(f"/queues/{q}/" for q in QUEUES),
        "/queues/resolved/",
        "/queues/mine/",
        f"/cases/?q={DONOR.lower()}",
        "/acks/",
        f"/acks/{endpoint}/",
    )
    page = open_browser(CLERK)
    looked_at = 0
    with clock.travel(60):  # the resolved list shows a case once its time has passed
        for path in pages:
            page.goto(f"{live_server.url}{path}")
            for width in (WIDE, PHONE):
                page.set_viewport_size({"width": width, "height": 900})
                screenshots.save(page, f"lists-{slug(path)}-{width}.png")
            page.set_viewport_size({"width": WIDE, "height": 900})
            fits(page, path)
            looked_at += ids_on_one_line(page, path)
    assert looked_at >= 40  # the tables had rows: the ids were looked at


def test_worklist_filters_fold_on_a_phone(ddb, open_browser, live_server, screenshots):
    """At 390 x 844 the worklist's filters are folded under "Filters" and the first case
    starts inside the first screen; with a filter set they are unfolded; at 1280 px they
    show without a click."""
    for n in range(3):
        stuck_case(f"fold-{uuid.uuid4()}", donor_ref=DONOR, amount=f"{n + 1}0.00")
    page = open_browser("staff", width=PHONE)
    page.set_viewport_size({"width": PHONE, "height": 844})
    page.goto(f"{live_server.url}/worklist/")
    screenshots.save(page, f"worklist-folded-{PHONE}.png")
    top = page.locator("#results tbody tr").first.bounding_box()["y"]
    assert top < 844, f"the first case starts {top:.0f} px down a 844 px screen"
    fold = page.locator("details.filter-fold")
    expect(fold).to_have_count(1)
    assert fold.get_attribute("open") is None
    expect(fold.locator("summary")).to_have_text("Filters")
    expect(page.get_by_label("Order")).to_be_hidden()

    fold.locator("summary").click()
    page.get_by_label("Order").select_option("amount")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url("**/worklist/?*sort=amount*")
    page.reload()
    expect(page.locator("details.filter-fold")).to_have_attribute("open", "")
    expect(page.get_by_label("Order")).to_be_visible()
    screenshots.save(page, f"worklist-filtered-{PHONE}.png")

    page.set_viewport_size({"width": WIDE, "height": 900})
    page.goto(f"{live_server.url}/worklist/")
    expect(page.get_by_label("Order")).to_be_visible()
    expect(page.locator("details.filter-fold summary")).to_be_hidden()
    screenshots.save(page, f"worklist-filters-{WIDE}.png")


# Each word (four or more letters, not part of an id) in the page's visible text that is
# laid out over more than one line, and every element the browser may hyphenate.
BROKEN_WORDS = """() => {
  const broken = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    // Ids (code, case ids, keys) are not words: a long one may break on a phone.
    if (!parent || !parent.checkVisibility() || parent.closest('code, kbd, .mono')) continue;
    for (const m of node.data.matchAll(/(?<![\\w#.:-])[A-Za-z]{4,}(?![\\w#-])/g)) {
      const range = document.createRange();
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const tops = new Set([...range.getClientRects()].filter(r => r.width > 0)
        .map(r => Math.round(r.top)));
      if (tops.size > 1) broken.push(m[0]);
    }
  }
  const hyphenated = [...document.querySelectorAll('body *')]
    .filter(e => getComputedStyle(e).hyphens === 'auto')
    .map(e => e.tagName + (e.className ? '.' + e.className : ''));
  return {broken, hyphenated};
}"""


def test_no_word_breaks_mid_word_on_a_phone(ddb, open_browser, live_server, screenshots):
    """At 390 px, with the menu unfolded, the overview, the acknowledgements list, the
    worklist, a queue and the pledge page break no word over two lines and let the
    browser hyphenate nothing: "Acknowledgements" is whole everywhere."""
    stuck_case(f"words-{uuid.uuid4()}", donor_ref=DONOR)
    attempts_logged()
    page = open_browser("supervisor", width=PHONE)
    for path in ("/", "/acks/", "/worklist/", "/queues/undelivered/", "/queues/stuck/"):
        page.goto(f"{live_server.url}{path}")
        menu = page.get_by_role("button", name="Menu")
        if menu.is_visible():
            menu.click()
        expect(page.get_by_role("link", name="Acknowledgements", exact=True)).to_be_visible()
        screenshots.save(page, f"words-{slug(path)}-{PHONE}.png")
        found = page.evaluate(BROKEN_WORDS)
        assert found["broken"] == [], f"{path}: words broken over lines: {found['broken']}"
        assert found["hyphenated"] == [], f"{path}: hyphenated: {found['hyphenated']}"


def test_the_claim_expiry_is_named_and_stays_in_its_card(
    ddb, open_browser, live_server, screenshots
):
    """A completed claim's expiry is its replay window ("Replay window ends", never
    "Lease ends"), and at 1280 px that line, its time and how long is left, stays
    inside the Claim card; a stuck (pending) claim's is its lease."""
    from tests.reconciliation.factories import ambiguous_case

    key = uuid_key()
    ambiguous_case(key, donor_ref=DONOR)
    pending = f"held-{uuid_key()}"
    stuck_case(pending, donor_ref=DONOR)
    page = open_browser("staff")
    page.goto(f"{live_server.url}/pledges/acme/{key}/")
    screenshots.save(page, f"pledge-{WIDE}.png")
    card = page.locator("section[aria-labelledby=claim-h]")
    line = card.locator("dt:has-text('ends') + dd")
    expect(line).to_contain_text("in ")
    box = card.bounding_box()
    for part in [line, *line.locator("*").all()]:
        edge = part.evaluate("e => e.getBoundingClientRect().right")
        assert edge <= box["x"] + box["width"], f"{part.inner_text()!r} ends at {edge:.0f} px"
        assert part.evaluate("e => e.scrollWidth <= e.clientWidth || e.clientWidth === 0")
    expect(card.locator("dt", has_text="Replay window ends")).to_have_count(1)
    expect(card).not_to_contain_text("Lease")
    page.set_viewport_size({"width": PHONE, "height": 900})
    screenshots.save(page, f"pledge-{PHONE}.png")

    page.set_viewport_size({"width": WIDE, "height": 900})
    page.goto(f"{live_server.url}/pledges/acme/{pending}/")
    card = page.locator("section[aria-labelledby=claim-h]")
    expect(card.locator("dt", has_text="Lease ends")).to_have_count(1)
    expect(card).not_to_contain_text("Replay window")

"""The dashboard as served from one region or the other (docs/regions.md): Django's test
client in this process, with ``AWS_REGION`` set to the serving region and
``DDB_REGIONS`` naming both, signed in as finance staff. It lists the queues page by
page and acts on cases through the case page's form, as a person does."""

from __future__ import annotations

import html
import re
import uuid

from django.test import override_settings

from dashboard.staff.views.pages import QUEUE_SLUGS
from reconciliation.cases.models import CASE_ID_PATTERN
from reconciliation.cases.repository import CaseRepository
from reconciliation.cases.vocabulary import CaseType
from reconciliation.stores import case_store, case_tag, every_store

CASE_ID_RE = re.compile(rf"/cases/({CASE_ID_PATTERN})/")
MORE_RE = re.compile(r'id="load-more".*?href="([^"]+)"', re.S)
MAX_PAGES = 50


def listed_from(client, region: str) -> set[str]:
    """Every case id the queue pages list, served from ``region``, following 'Load
    more' to the end of each queue."""
    found: set[str] = set()
    with override_settings(AWS_REGION=region):
        for slug in QUEUE_SLUGS:
            url: str | None = f"/queues/{slug}/"
            for _ in range(MAX_PAGES):
                if url is None:
                    break
                page = client.get(url)
                assert page.status_code == 200, (region, url, page.status_code)
                text = page.content.decode()
                found |= set(CASE_ID_RE.findall(text))
                more = MORE_RE.search(text)
                url = html.unescape(more.group(1)) if more else None
            assert url is None, f"{slug}: more than {MAX_PAGES} pages"
    return found


def act_from_each_region(client, open_cases: list[dict]) -> list[dict]:
    """Served from each region in turn, a person asks RETRY_COMMIT (through the case
    page's form) on an open 'did it commit?' case that lives in another region; the task
    runs inline. Returns what was done and how each case ended."""
    done = []
    for store in every_store():
        case = next(
            c
            for c in open_cases
            if case_tag(c["case_id"]) != store.tag
            and c["case_type"] in (CaseType.STUCK_PENDING, CaseType.AMBIGUOUS_TIMEOUT)
        )
        case_id = case["case_id"]
        with override_settings(AWS_REGION=store.region_name):
            shown = client.get(f"/cases/{case_id}/")
            assert shown.status_code == 200 and case_id in shown.content.decode()
            response = client.post(
                f"/cases/{case_id}/dispose/",
                {
                    "seen_version": case["version"],
                    "action_id": str(uuid.uuid4()),
                    "disposition": "RETRY_COMMIT",
                    "reason_code": "TRANSIENT_FAILURE",
                    "reason_text": "The answer was lost; retry the commit.",
                },
            )
        assert response.status_code == 302, (case_id, response.status_code)
        after = CaseRepository(case_store(case_id)).get(case_id)
        assert after is not None and after.is_resolved, (case_id, after)
        done.append(
            {
                "served_from": store.region_name,
                "case_id": case_id,
                "case_type": case["case_type"],
                "state_after": after.state,
            }
        )
    return done

"""Assignment: supervisors assign a case to any active finance staff
member or supervisor and release anyone's; finance staff take a case and release their
own; auditors are read-only and are offered neither "Assigned to me" nor "My cases";
every change is audited with who was assigned before and after."""

from __future__ import annotations

import re

import pytest

from reconciliation.casework.dispositions import case_assign
from tests.helpers import acting, audit_events, repositories, sign_in, staff_user
from tests.reconciliation.factories import stuck_case

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]


def _form(case) -> dict:
    return {"seen_version": case.version, "action_id": f"a-{case.version}"}


def test_supervisor_assigns_to_any_active_staff_member(ddb, client):
    """The supervisor's case page offers a select of active finance staff and
    supervisors (no auditors, no inactive users); assigning records the assignee and an
    audit event naming the previous one."""
    staff_user("fay", "finance_staff")
    staff_user("sam", "supervisor")
    staff_user("aud", "auditor")
    gone = staff_user("old", "finance_staff")
    gone.is_active = False
    gone.save()
    case = stuck_case("as-1")
    sign_in(client, "supervisor", username="boss")
    page = client.get(f"/cases/{case.case_id}/").content.decode()
    options = re.findall(
        r'<option value="([^"]+)"', page[page.find('name="assignee"') :].split("</select>")[0]
    )
    assert options == ["boss", "fay", "sam"]
    response = client.post(f"/cases/{case.case_id}/assign/", {**_form(case), "assignee": "fay"})
    assert response.status_code == 302
    stored = repositories().cases.get(case.case_id)
    assert stored.assignee == "fay"
    [event] = [
        e for e in audit_events(ddb, f"CASE#{case.case_id}") if e["action"] == "case_assigned"
    ]
    assert event["actor"]["username"] == "boss"
    assert event["after"]["assignee"] == "fay" and event["before"]["assignee"] is None


def test_supervisor_cannot_assign_to_someone_off_the_list(ddb, client):
    """An auditor, an unknown or an inactive name is refused with 400; nothing changes."""
    staff_user("aud", "auditor")
    case = stuck_case("as-2")
    sign_in(client, "supervisor", username="boss")
    for name in ("aud", "ghost", "x" * 500):
        response = client.post(f"/cases/{case.case_id}/assign/", {**_form(case), "assignee": name})
        assert response.status_code == 400, name
    assert repositories().cases.get(case.case_id).version == case.version


def test_finance_staff_take_and_release_only_their_own(ddb, client):
    """Finance staff see no staff list; they may take a case and release it, but not
    assign it to someone else (403) nor release a colleague's (403)."""
    staff_user("fay", "finance_staff")
    case = stuck_case("as-3")
    sign_in(client, "finance_staff", username="ann")
    page = client.get(f"/cases/{case.case_id}/").content.decode()
    assert 'name="assignee"' not in page and "Assign to me" in page
    refused = client.post(f"/cases/{case.case_id}/assign/", {**_form(case), "assignee": "fay"})
    assert refused.status_code == 403
    taken = client.post(f"/cases/{case.case_id}/assign/", _form(case))
    assert taken.status_code == 302 and repositories().cases.get(case.case_id).assignee == "ann"
    case = repositories().cases.get(case.case_id)
    released = client.post(f"/cases/{case.case_id}/assign/", {**_form(case), "unassign": "on"})
    assert released.status_code == 302 and repositories().cases.get(case.case_id).assignee is None
    other = stuck_case("as-4")
    other = case_assign(**acting("fay").on(other)).case
    refused = client.post(f"/cases/{other.case_id}/assign/", {**_form(other), "unassign": "on"})
    assert refused.status_code == 403
    assert repositories().cases.get(other.case_id).assignee == "fay"
    # Nor take it from her: "Assign to me" is not offered on a colleague's case, and
    # asking anyway is refused.
    page = client.get(f"/cases/{other.case_id}/").content.decode()
    assert "Assign to me" not in page and "fay" in page
    taken = client.post(f"/cases/{other.case_id}/assign/", _form(other))
    assert taken.status_code == 403
    assert repositories().cases.get(other.case_id).assignee == "fay"


def test_supervisor_releases_a_colleagues_case(ddb, client):
    """A supervisor may release a case someone else holds."""
    case = stuck_case("as-5")
    case = case_assign(**acting("fay").on(case)).case
    sign_in(client, "supervisor", username="boss")
    page = client.get(f"/cases/{case.case_id}/").content.decode()
    assert "Release from fay" in page
    response = client.post(f"/cases/{case.case_id}/assign/", {**_form(case), "unassign": "on"})
    assert response.status_code == 302
    assert repositories().cases.get(case.case_id).assignee is None


def test_my_cases_lists_open_cases_assigned_to_me_in_every_queue(ddb, client):
    """ "My cases" shows my open cases across queues, not others', not resolved ones;
    the navigation offers it to finance staff and supervisors."""
    mine = stuck_case("my-1")
    theirs = stuck_case("my-2")
    case_assign(**acting("ann").on(mine))
    case_assign(**acting("fay").on(theirs))
    sign_in(client, "finance_staff", username="ann")
    html = client.get("/queues/mine/").content.decode()
    assert re.findall(r'<td class="mono case-id"><a href="/cases/([^/]+)/">', html) == [
        mine.case_id
    ]
    assert 'href="/queues/mine/"' in html


def test_auditor_is_offered_neither_assigned_to_me_nor_my_cases(ddb, auditor_client):
    """Auditors are read-only: no "Assigned to me" filter, no "My cases" link, 403 on
    the list, and no assignment form on a case."""
    case = stuck_case("au-1")
    queue = auditor_client.get("/queues/stuck/").content.decode()
    assert "Assigned to me" not in queue and 'href="/queues/mine/"' not in queue
    assert auditor_client.get("/queues/mine/").status_code == 403
    page = auditor_client.get(f"/cases/{case.case_id}/").content.decode()
    assert "Assign to me" not in page and 'name="assignee"' not in page

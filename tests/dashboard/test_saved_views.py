"""Saved views of the worklist (docs/worklist.md): a name and the worklist's query string,
per user; saved from the worklist, listed on it as links that carry the filters, deleted
by their owner only; bad input is a form error and writes nothing."""

from __future__ import annotations

import pytest

from dashboard.staff.models import SavedView
from tests.helpers import sign_in, staff_user

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]


def test_save_then_listed_as_a_link_with_the_filters(ddb, client):
    """Saving sends one back to the worklist with those filters, and the view is listed
    as a link to exactly that URL."""
    user = sign_in(client)
    response = client.post(
        "/worklist/views/", {"name": "GBP by amount", "query": "?currency=gbp&sort=amount"}
    )
    assert response.status_code == 302
    assert response["Location"] == "/worklist/?currency=GBP&sort=amount"
    [view] = SavedView.objects.filter(user=user)
    assert (view.name, view.query) == ("GBP by amount", "currency=GBP&sort=amount")
    page = client.get("/worklist/").content.decode()
    assert '<a href="/worklist/?currency=GBP&amp;sort=amount">GBP by amount</a>' in page


def test_only_ones_own_views_are_listed(ddb, staff_client):
    """A colleague's saved view is not on one's worklist."""
    other = staff_user("sv-other")
    SavedView.objects.create(user=other, name="Not yours", query="currency=USD")
    assert "Not yours" not in staff_client.get("/worklist/").content.decode()


def test_delete_own_view(ddb, client):
    """The owner deletes a view; it is gone from the list."""
    user = sign_in(client)
    view = SavedView.objects.create(user=user, name="Mine", query="sla=breached")
    response = client.post(f"/worklist/views/{view.id}/delete/")
    assert response.status_code == 302 and response["Location"] == "/worklist/"
    assert not SavedView.objects.filter(id=view.id).exists()


def test_another_users_view_cannot_be_deleted_by_id(ddb, client):
    """Posting the delete of someone else's view by its id is a 404; the view stays."""
    other = staff_user("sv-owner")
    view = SavedView.objects.create(user=other, name="Theirs", query="currency=EUR")
    sign_in(client, "supervisor", username="sv-supervisor")
    assert client.post(f"/worklist/views/{view.id}/delete/").status_code == 404
    assert SavedView.objects.filter(id=view.id, user=other).exists()


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"name": "", "query": "currency=GBP"}, "This field is required"),
        ({"name": "x" * 81, "query": ""}, "at most 80 characters"),
        ({"name": "Evil", "query": "currency=GBP&next=https://evil.example"}, "not a worklist"),
        ({"name": "Bad value", "query": "currency=12"}, "three-letter currency"),
        ({"name": "Twice", "query": "currency=GBP&currency=USD"}, "may appear once"),
        ({"name": "Bad sort", "query": "sort=random"}, "an order this page offers"),
    ],
)
def test_bad_input_is_a_form_error_and_writes_nothing(ddb, staff_client, form, message):
    """A missing or long name, an unknown filter, a bad value or a repeated filter is a
    400 with the form's message; nothing is saved."""
    response = staff_client.post("/worklist/views/", form)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert SavedView.objects.count() == 0


def test_a_second_view_with_the_same_name_is_refused(ddb, staff_client):
    """One person's views have distinct names: the second is refused, the first kept."""
    staff_client.post("/worklist/views/", {"name": "Daily", "query": "currency=GBP"})
    response = staff_client.post("/worklist/views/", {"name": "Daily", "query": "currency=USD"})
    assert response.status_code == 400
    assert "already have a view with this name" in response.content.decode()
    assert list(SavedView.objects.values_list("query", flat=True)) == ["currency=GBP"]

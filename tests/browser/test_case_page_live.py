"""The case page in a real browser while background work runs: finance staff accept the
suggested "Retry the commit", submit it, and the page, and the queue table open beside
it, update by themselves when a real Celery worker has run the retry; no reload.
Screenshots of the case page per state, at 1280 and 800 px."""

from __future__ import annotations

import os
import re

import pytest

from reconciliation.casework.overrides import override_request
from reconciliation.casework.retries import RETRY_COMMIT_TASK
from tests.helpers import acting
from tests.processes import celery_worker
from tests.reconciliation.factories import key_reuse_case, stuck_case

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def background_tasks(monkeypatch, settings, ddb, tmp_path):
    """Tasks go to Redis, on a queue of this test's own, and a real worker (started by
    the test when it chooses: ``start()``) runs them against this test's tables."""
    from celery import current_app

    queue = f"case-page-{os.getpid()}-{tmp_path.name}"
    conf = current_app.conf
    before = conf.task_always_eager
    conf.task_always_eager = False
    task = current_app.tasks[RETRY_COMMIT_TASK]
    monkeypatch.setattr(task, "delay", lambda *args: task.apply_async(args, queue=queue))
    env = dict(
        os.environ,
        DYNAMODB_ENDPOINT_URL=ddb.endpoint_url,
        DDB_TABLE_PREFIX=settings.DDB_TABLE_PREFIX,
        REDIS_URL=settings.REDIS_URL,
        VAR_DIR=str(tmp_path),
        DJANGO_SETTINGS_MODULE="dashboard.settings",
    )
    worker = celery_worker(env, tmp_path, queue=queue)
    yield worker
    worker.stop()
    conf.task_always_eager = before


def test_accepted_retry_runs_in_the_background_and_the_page_updates_itself(
    ddb, open_browser, live_server, screenshots, background_tasks
):
    """A stuck case with no pledge: the page suggests "Retry the commit"; accepting fills
    in the form (nothing recorded yet); submitting queues the retry and the page says it
    runs in the background; when the worker has run it, the case page and the queue table
    show the outcome without a reload."""
    case = stuck_case("live-4001")
    page = open_browser("staff")
    page.goto(f"{live_server.url}/cases/{case.case_id}/")
    suggestion = page.locator("#suggestion")
    assert "No pledge exists and the attempt's token window is open" in suggestion.inner_text()
    assert page.locator("#headline").get_by_text("No outcome recorded").is_visible()
    screenshots.shoot(page, "case-open-suggested")

    suggestion.get_by_role("link", name="Accept suggestion").click()
    page.locator("#act .prefilled").wait_for()
    form = page.locator("form.action-form").first
    # Anchored: a withheld disposition's reason may mention retrying the commit too.
    assert form.get_by_role("radio", name=re.compile("^Retry the commit")).is_checked()
    reason = form.get_by_label("Reason", exact=True)
    assert "finds no pledge for acme#live-4001" in reason.input_value()
    assert form.get_by_label("Reason code").input_value() == "TRANSIENT_FAILURE"
    assert page.locator("#case-live").count() == 0  # nothing was recorded by accepting
    screenshots.shoot(page, "case-suggestion-accepted")

    queue = page.context.new_page()
    page.evaluate("window.notReloaded = true")  # a reload would forget it
    form.get_by_role("button", name="Record disposition").click()
    page.locator("#messages").get_by_text("The commit will be retried").wait_for()
    live = page.locator("#case-live")
    live.get_by_text("Retrying the commit in the background").wait_for()
    assert page.locator("#headline").get_by_text("No outcome recorded").is_visible()
    screenshots.shoot(page, "case-retry-running")

    queue.goto(f"{live_server.url}/queues/stuck/")
    row = queue.locator("#results tbody tr", has_text="live-4001")
    assert row.count() == 1
    queue.evaluate("window.notReloaded = true")

    background_tasks.start()
    headline = page.locator("#headline")
    headline.locator(".tag", has_text="Resolved").wait_for(timeout=60_000)
    assert page.evaluate("window.notReloaded") is True
    page.locator("#messages").get_by_text("The commit retry has ended").wait_for()
    assert page.locator("#messages").get_by_text("will be retried").count() == 0
    assert live.count() == 0  # the poller is gone: nothing polls once the work is done
    text = headline.inner_text()
    assert "Retry the commit" in text and "by system" in text
    assert "the pledge was committed by the retry" in text
    assert page.locator("#evidence").get_by_text("is recorded").is_visible()
    assert page.locator("#suggestion").count() == 0
    assert page.locator(".token-window.inside, .token-window.outside").count() == 0
    screenshots.shoot(page, "case-resolved-after-retry")

    row.wait_for(state="detached", timeout=15_000)  # the queue table reloaded itself
    assert queue.evaluate("window.notReloaded") is True
    assert "retry_commit_task" in background_tasks.log()


def test_case_page_states_for_each_role(ddb, open_browser, live_server, screenshots, settings):
    """Screenshots of the case page in its other states: a cancelled transaction beside
    another attempt's pledge (suggested: duplicate correctly rejected), awaiting a
    supervisor's decision, and an auditor's view (the suggestion without a button)."""
    settings.AUTO_RESOLVE_COMMITTED = False
    cancelled = key_reuse_case(ddb, "live-5001")
    waiting = stuck_case("live-5002")
    override_request(
        override="RELEASE_CLAIM",
        **acting("staff2").on(
            waiting,
            reason_code="CLIENT_CONFIRMED",
            reason_text="The client will send the pledge again.",
            action_id="live-5002",
        ),
    )
    staff = open_browser("staff")
    staff.goto(f"{live_server.url}/cases/{cancelled.case_id}/")
    headline = staff.locator("#headline").inner_text()
    assert "A pledge is recorded, but this transaction wrote nothing" in headline
    assert staff.get_by_text("Nothing was written").count() == 0
    assert "Duplicate correctly rejected" in staff.locator("#suggestion").inner_text()
    screenshots.shoot(staff, "case-cancelled-with-pledge")

    staff.goto(f"{live_server.url}/cases/{waiting.case_id}/")
    assert "Waiting for a supervisor's decision" in staff.locator("#suggestion").inner_text()
    assert staff.get_by_role("link", name="Accept suggestion").count() == 0
    screenshots.shoot(staff, "case-awaiting-approval")

    auditor = open_browser("auditor")
    stuck = stuck_case("live-5003")
    auditor.goto(f"{live_server.url}/cases/{stuck.case_id}/")
    assert "Retry the commit" in auditor.locator("#suggestion").inner_text()
    assert auditor.get_by_role("link", name="Accept suggestion").count() == 0
    screenshots.shoot(auditor, "case-auditor")

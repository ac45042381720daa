"""Playwright driving Debian's Chromium against the app served by ``live_server``, over
the test's own DynamoDB Local tables (the ``browser`` marker keeps ``ddb`` on DynamoDB
Local). Playwright's own browser download does not work here, so a missing
``/usr/bin/chromium`` skips locally and fails under CI."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import OUTPUT_DIR
from tests.helpers import staff_user

CHROMIUM = Path(os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PASSWORD = "correct-horse-battery-9"
WIDE, NARROW = 1280, 800


@pytest.fixture(scope="module")
def chromium_browser() -> Iterator[object]:
    if not CHROMIUM.exists():
        message = f"Chromium not found at {CHROMIUM} (Debian: apt-get install chromium)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; Django's ORM, used by the
    # tests to create users, would otherwise refuse to run next to it. Module scope: the
    # loop and the allowance end with the browser tests.
    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            yield browser
            browser.close()
    finally:
        if before is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


@dataclass(frozen=True)
class Camera:
    """A page at 1280 and 800 px wide. The pictures (full page, under
    test-results/screenshots/) are for a person to look at and are saved only when
    ``TEST_SCREENSHOTS=1``: encoding them was most of a browser test's time, and nobody
    looks at a CI run's. The widths are measured either way."""

    folder: Path
    saving: bool

    def save(self, page: Any, file_name: str) -> None:
        """The page as it is now (its current width), when pictures are asked for."""
        if self.saving:
            path = self.folder / file_name
            path.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(path), full_page=True)

    def shoot(self, page: Any, name: str) -> dict[int, tuple[int, int]]:
        """Each width's document scroll width and client width; the page is left wide."""
        widths = {}
        for width in (WIDE, NARROW):
            page.set_viewport_size({"width": width, "height": 900})
            self.save(page, f"{name}-{width}.png")
            widths[width] = tuple(
                page.evaluate(
                    "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
                )
            )
        page.set_viewport_size({"width": WIDE, "height": 900})
        return widths


@pytest.fixture
def screenshots() -> Camera:
    return Camera(OUTPUT_DIR / "screenshots", os.environ.get("TEST_SCREENSHOTS") == "1")


@pytest.fixture
def staff_users(transactional_db) -> dict[str, str]:
    """One user per role (and a second supervisor), all with the same password."""
    from django_otp.plugins.otp_totp.models import TOTPDevice

    users = {
        "staff": "finance_staff",
        "staff2": "finance_staff",
        "supervisor": "supervisor",
        "supervisor2": "supervisor",
        "auditor": "auditor",
    }
    for username, role in users.items():
        user = staff_user(username, role, password=PASSWORD)
        if role in ("supervisor", "auditor"):  # they sign in with an authenticator
            TOTPDevice.objects.create(user=user, name="authenticator", confirmed=True)
    return users


def authenticator_code(username: str) -> str:
    """The code ``username``'s authenticator shows now, or "" without one. The device
    forgets the last code it accepted, so one test may sign the same person in twice
    within 30 seconds (production refuses that replay: test_second_factor.py)."""
    from django_otp.oath import totp
    from django_otp.plugins.otp_totp.models import TOTPDevice

    device = TOTPDevice.objects.filter(user__username=username, confirmed=True).first()
    if device is None:
        return ""
    TOTPDevice.objects.filter(pk=device.pk).update(last_t=-1)
    value = totp(device.bin_key, device.step, device.t0, device.digits, device.drift)
    return f"{value:0{device.digits}d}"


@pytest.fixture
def open_browser(chromium_browser, live_server, staff_users):
    """``open_browser(username)`` → a signed-in page at 1280 px; every context is closed
    at the end of the test."""
    contexts = []

    def sign_in(username: str, width: int = WIDE):
        context = chromium_browser.new_context(viewport={"width": width, "height": 900})
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(15_000)
        # A page load waits for its static files and first reads: on two cores shared
        # with the other worker's process sets it took over 15 s (a keyboard test timed
        # out in wait_for_url). A bound, not a measure: a quiet load takes about 1 s.
        page.set_default_navigation_timeout(45_000)
        page.goto(f"{live_server.url}/accounts/login/")
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(PASSWORD)
        page.locator("#id_otp_token").fill(authenticator_code(username))
        page.get_by_role("button", name="Sign in").click()
        # Finance staff land on the worklist, the other roles on the overview.
        landing = "/worklist/" if staff_users.get(username) == "finance_staff" else "/"
        page.wait_for_url(f"{live_server.url}{landing}")
        return page

    yield sign_in
    for context in contexts:
        context.close()

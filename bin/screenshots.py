#!/usr/bin/env python
"""Screenshots of the staff pages for each role, at 1280 and 390 px, against a running
``make run``; and a line per page that overflows its width or answers an error.

    make manage ARGS="add_staff staff --role finance_staff --password P"   # once per user
    .venv/bin/python bin/screenshots.py --password P --out var/screenshots

Look at the pictures: this tool only finds what a machine can (a status, a width).
Demo mode (``make run``) skips the second factor, so a password is enough.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin

from playwright.sync_api import Page, sync_playwright

WIDTHS = (1280, 390)
ROLES = {
    "staff": "finance_staff",
    "supervisor": "supervisor",
    "auditor": "auditor",
}
# Pages every role may open; a role that may not open one gets its 403 page in the
# picture, which is worth seeing too.
PAGES = (
    ("overview", "/"),
    ("worklist", "/worklist/"),
    ("mine", "/queues/mine/"),
    ("queue-stuck", "/queues/stuck/"),
    ("queue-cancelled", "/queues/cancelled/"),
    ("resolved", "/queues/resolved/"),
    ("search", "/cases/?q=acme"),
    ("approvals", "/approvals/"),
    ("audit", "/audit/"),
    ("audit-exports", "/audit/exports/"),
    ("drill", "/drill/"),
    ("notifications", "/notifications/"),
    ("acks", "/acks/"),
    ("acks-endpoint", "/acks/1/"),
    ("funds", "/funds/"),
    ("pledge-acme", "/pledges/acme/order-1001/"),
    ("queue-undelivered", "/queues/undelivered/"),
    ("rejected", "/requests/rejected/?tenant=sim"),
    ("profile", "/accounts/profile/"),
)


@dataclass(frozen=True)
class Finding:
    user: str
    page: str
    width: int
    what: str


def sign_in(page: Page, base: str, username: str, password: str) -> None:
    page.goto(urljoin(base, "/accounts/login/"))
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()


def first_case_path(page: Page, base: str) -> str | None:
    """A case page to picture: the first case link on the overview's queues."""
    page.goto(urljoin(base, "/queues/stuck/"))
    link = page.locator("#results tbody a[href^='/cases/C-']").first
    return link.get_attribute("href") if link.count() else None


def pledge_path(page: Page, base: str, case: str) -> str | None:
    """The pledge page a case links to."""
    page.goto(urljoin(base, case))
    link = page.locator("a[href^='/pledges/']").first
    return link.get_attribute("href") if link.count() else None


def shoot(base: str, out: Path, password: str, users: list[str]) -> list[Finding]:
    findings: list[Finding] = []
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"]
        )
        for user in users:
            context = browser.new_context(viewport={"width": WIDTHS[0], "height": 900})
            page = context.new_page()
            sign_in(page, base, user, password)
            pages = list(PAGES)
            case = first_case_path(page, base)
            if case:
                pages.append(("case", case))
                pledge = pledge_path(page, base, case)
                if pledge:
                    pages.append(("pledge", pledge))
            for name, path in pages:
                for width in WIDTHS:
                    page.set_viewport_size({"width": width, "height": 900})
                    answer = page.goto(urljoin(base, path))
                    page.wait_for_load_state("networkidle")
                    status = answer.status if answer else 0
                    if status >= 500:
                        findings.append(Finding(user, name, width, f"answered {status}"))
                    scroll = page.evaluate("document.documentElement.scrollWidth")
                    if scroll > width:
                        findings.append(Finding(user, name, width, f"{scroll} px wide"))
                    page.screenshot(path=str(out / f"{user}-{name}-{width}.png"), full_page=True)
            context.close()
        browser.close()
    return findings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--password", required=True)
    parser.add_argument("--out", type=Path, default=Path("var/screenshots"))
    parser.add_argument("--users", nargs="+", default=list(ROLES))
    args = parser.parse_args()
    findings = shoot(args.base_url, args.out, args.password, args.users)
    for finding in findings:
        print(f"{finding.user:<11} {finding.page:<16} {finding.width:>4} px  {finding.what}")
    print(f"screenshots: {len(findings)} findings, pictures in {args.out}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())

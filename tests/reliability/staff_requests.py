"""Run as a child process (``python -m tests.reliability.staff_requests CASE EXPORT``) in a
production-like environment (:func:`tests.reliability.procs.django_env`): makes every
staff request that starts or reads background work, through Django's full stack, and
prints one JSON line per request: what answered and how long it took."""

from __future__ import annotations

import datetime as dt
import json
import sys
import time


def main(case_id: str, export_id: str) -> None:
    import django

    django.setup()
    from django.test import Client

    from tests.helpers import repositories, sign_in

    def timed(name: str, call) -> dict:
        started = time.monotonic()
        response = call()
        answer = {
            "request": name,
            "status": response.status_code,
            "seconds": round(time.monotonic() - started, 2),
            "location": response.get("Location", ""),
            "body": response.content.decode(errors="replace") if not response.streaming else "",
        }
        print(json.dumps(answer), flush=True)
        return answer

    supervisor, staff = (
        Client(SERVER_NAME="localhost", raise_request_exception=False) for _ in "ab"
    )
    sign_in(supervisor, "supervisor")
    sign_in(staff, "finance_staff")
    today = dt.datetime.now(dt.UTC).date().isoformat()
    timed(
        "export_start",
        lambda: supervisor.post(
            "/audit/exports/", {"format": "csv", "since": today, "until": today}, follow=True
        ),
    )
    timed("export_status", lambda: supervisor.get(f"/audit/exports/{export_id}/"))
    timed("drill_start", lambda: supervisor.post("/drill/run", follow=True))
    timed("drill_page", lambda: supervisor.get("/drill/"))
    case = repositories().cases.get(case_id)
    timed(
        "retry_commit",
        lambda: staff.post(
            f"/cases/{case_id}/dispose/",
            {
                "seen_version": case.version,
                "action_id": "outage-retry",
                "disposition": "RETRY_COMMIT",
                "reason_code": "TRANSIENT_FAILURE",
                "reason_text": "The worker died before committing; retry it.",
            },
            follow=True,
        ),
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

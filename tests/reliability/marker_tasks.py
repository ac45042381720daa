"""A task for tests only, loaded into a real worker with ``--include``: it appends its
token to a file, so a test can count how many times a message ran without DynamoDB."""

from __future__ import annotations

from celery import shared_task

MARK_TASK = "tests.reliability.marker_tasks.mark"


@shared_task(name=MARK_TASK, ignore_result=True)
def mark(path: str, token: str) -> None:
    with open(path, "a") as marks:
        marks.write(token + "\n")

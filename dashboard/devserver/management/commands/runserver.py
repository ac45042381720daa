"""``manage.py runserver``, refused on anything but demo data (docs/security.md).

Django's development server takes a malformed ``Content-Length`` at its word and reads
the rest of the body as the next request line, which it then logs: a donor reference
in the log. It is also single-process and resets connections under load. ``make run``
and the Procfile serve with gunicorn; this command (which takes the place of
whitenoise's ``runserver_nostatic``, listed first in ``INSTALLED_APPS`` so it wins)
runs only in debug, with ``DEMO_MODE=1``, against DynamoDB Local on this machine.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management.base import CommandError

from reconciliation.dynamo.client import regions

if TYPE_CHECKING:
    # whitenoise ships no type information. Its command subclasses the runserver of the
    # apps listed after whitenoise.runserver_nostatic, and that app is not installed here,
    # so the search ends at its fallback: Django's own.
    from django.core.management.commands.runserver import Command as WhitenoiseRunserver
else:
    from whitenoise.runserver_nostatic.management.commands.runserver import (
        Command as WhitenoiseRunserver,
    )

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def refusal(*, debug: bool, demo_mode: str, endpoints: Iterable[str | None]) -> str | None:
    """Why runserver may not run here, or None for demo data on DynamoDB Local."""
    if not debug or demo_mode != "1":
        return "it runs only with DJANGO_DEBUG=1 and DEMO_MODE=1 (synthetic demo data)"
    for url in endpoints:
        host = urlsplit(url).hostname if url else None
        if host not in LOOPBACK_HOSTS:
            return "it runs only against DynamoDB Local on this machine, never AWS"
    return None


class Command(WhitenoiseRunserver):
    help = "Development server for demo data only; everything else uses `make run` (gunicorn)."

    def handle(self, *args: Any, **options: Any) -> str | None:
        problem = refusal(
            debug=settings.DEBUG,
            demo_mode=os.environ.get("DEMO_MODE", ""),
            endpoints=[region.endpoint_url for region in regions()],
        )
        if problem:
            raise CommandError(
                f"runserver refused: {problem}. It logs a malformed request's body as the "
                "next request line. Serve with gunicorn: `make run`, or the Procfile's web "
                "process."
            )
        return super().handle(*args, **options)

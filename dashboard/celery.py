"""The Celery application, configured from Django settings (``CELERY_*``)."""

from __future__ import annotations

import os

import django
from celery import Celery, signals
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")

app = Celery("dashboard")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Each domain package keeps its tasks in its own ``tasks`` module; the dashboard's are
# those of its own database (the delivery attempt log's prune).
app.autodiscover_tasks(
    ["reconciliation.audit", "reconciliation.casework", "reconciliation.ops", "dashboard.tenancy"]
)


@app.on_after_configure.connect
def redbeat_settings_named(sender: Celery, **kwargs: object) -> None:
    """RedBeat looks its settings up by their own names (``redbeat_redis_url``) and finds
    no ``CELERY_``-prefixed key among them: it read them all the same, but warned at every
    start that it fell back on the broker's. Named as RedBeat asks, once configured."""
    sender.conf.update(
        redbeat_redis_url=settings.CELERY_REDBEAT_REDIS_URL,
        redbeat_redis_options=settings.CELERY_REDBEAT_REDIS_OPTIONS,
        redbeat_key_prefix=settings.CELERY_REDBEAT_KEY_PREFIX,
        redbeat_lock_timeout=settings.CELERY_REDBEAT_LOCK_TIMEOUT,
    )


@signals.worker_init.connect
@signals.beat_init.connect
def refuse_a_differing_configuration(**kwargs: object) -> None:
    """The worker and beat refuse to start with a configuration that differs from the
    one ``ddb_setup`` recorded (reconciliation/ops/config.py), before they consume or
    schedule anything."""
    django.setup()  # done already in a worker (Celery's Django fixup); not in beat
    # This module loads with the dashboard package, before settings exist.
    from reconciliation.ops.config import config_refuse_start  # noqa: PLC0415 - after setup()

    try:
        config_refuse_start()
    except ImproperlyConfigured as exc:
        # Celery logs an Exception raised by a signal handler and starts anyway;
        # SystemExit is no Exception: it stops the worker or beat, with this message.
        raise SystemExit(f"refusing to start: {exc}") from exc

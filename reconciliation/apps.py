from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from reconciliation.audit.checkpoints import DEFAULT_PERIOD_S, period_setting_problem
from reconciliation.casework.notifications import DEFAULT_SLA_HOURS, sla_setting_problem
from reconciliation.ops.config import ConfigState, config_compare


class ReconciliationConfig(AppConfig):
    name = "reconciliation"
    verbose_name = "Pledge reconciliation"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        checks.register(audit_checkpoint_period_check)
        checks.register(queue_sla_check)
        checks.register(configuration_check)
        # Register the Celery tasks in every process (web, commands, tests), not only in
        # the worker: services enqueue a task by its registered name (RETRY_COMMIT_TASK)
        # and never import the task modules (the tasks import the services).
        import reconciliation.audit.tasks  # noqa: PLC0415 - once the app registry is ready
        import reconciliation.casework.tasks  # noqa: PLC0415 - once the app registry is ready
        import reconciliation.ops.tasks  # noqa: F401, PLC0415 - once the app registry is ready


def audit_checkpoint_period_check(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """``AUDIT_CHECKPOINT_PERIOD_S`` must divide a day (``manage.py check``, ``migrate``
    and ``runserver`` refuse to go on otherwise; the checkpoint task and ``verify_audit``
    refuse too)."""
    value = getattr(settings, "AUDIT_CHECKPOINT_PERIOD_S", DEFAULT_PERIOD_S)
    problem = period_setting_problem(value)
    return [checks.Error(problem, id="reconciliation.E001")] if problem else []


def queue_sla_check(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """``QUEUE_SLA_HOURS`` ("stuck=4,ambiguous=2") and ``QUEUE_SLA_DEFAULT_HOURS`` name
    known queues and positive hours; ``SUPERVISOR_DIGEST_HOUR`` is an hour of the day."""
    problems: list[checks.CheckMessage] = []
    problem = sla_setting_problem(
        getattr(settings, "QUEUE_SLA_HOURS", ""),
        getattr(settings, "QUEUE_SLA_DEFAULT_HOURS", DEFAULT_SLA_HOURS),
    )
    if problem:
        problems.append(checks.Error(problem, id="reconciliation.E002"))
    hour = getattr(settings, "SUPERVISOR_DIGEST_HOUR", 7)
    if not isinstance(hour, int) or not 0 <= hour <= 23:
        problems.append(
            checks.Error(
                f"SUPERVISOR_DIGEST_HOUR must be an hour 0..23 (UTC), not {hour!r}",
                id="reconciliation.E003",
            )
        )
    return problems


def configuration_check(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """This process's configuration against the one ``ddb_setup`` recorded in every
    region (reconciliation/ops/config.py): an error where it differs (``runserver``,
    ``check`` and every command that runs checks refuse; wsgi, the worker and beat refuse
    too), a warning where none is recorded yet or DynamoDB cannot be read now (a
    development or test start is never blocked by an engine that is not up yet)."""
    try:
        compared = config_compare()
    except ImproperlyConfigured as exc:  # DDB_REGIONS / DDB_PRIMARY_REGION malformed
        return [checks.Error(str(exc), id="reconciliation.E005")]
    fix = (
        "Make this process's settings match the recorded ones, or accept this "
        "configuration deliberately: manage.py ddb_setup --accept-config (audited)."
    )
    messages: list[checks.CheckMessage] = []
    for c in compared:
        if c.state == ConfigState.DIFFERS:
            messages.append(
                checks.Error(
                    f"configuration differs from the one recorded in {c.region}: "
                    + ", ".join(c.fields),
                    hint=fix,
                    id="reconciliation.E004",
                )
            )
        elif c.state == ConfigState.NOT_RECORDED:
            messages.append(
                checks.Warning(
                    f"no configuration recorded in {c.region} yet",
                    hint="manage.py ddb_setup records it",
                    id="reconciliation.W004",
                )
            )
        elif c.state == ConfigState.UNREACHABLE:
            messages.append(
                checks.Warning(
                    f"configuration not checked: DynamoDB in {c.region} did not answer "
                    f"({c.problem})",
                    id="reconciliation.W005",
                )
            )
    return messages

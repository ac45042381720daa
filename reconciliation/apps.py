from django.apps import AppConfig
from django.core import checks


class ReconciliationConfig(AppConfig):
    name = "reconciliation"
    verbose_name = "Pledge reconciliation"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        checks.register(audit_checkpoint_period_check)
        checks.register(queue_sla_check)
        # Register the Celery tasks in every process (web, commands, tests), not only in
        # the worker: services enqueue a task by its registered name (RETRY_COMMIT_TASK)
        # and never import the task modules (the tasks import the services).
        import reconciliation.audit.tasks
        import reconciliation.casework.tasks
        import reconciliation.ops.tasks  # noqa: F401


def audit_checkpoint_period_check(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """``AUDIT_CHECKPOINT_PERIOD_S`` must divide a day (``manage.py check``, ``migrate``
    and ``runserver`` refuse to go on otherwise; the checkpoint task and ``verify_audit``
    refuse too)."""
    from django.conf import settings

    from reconciliation.audit.checkpoints import DEFAULT_PERIOD_S, period_setting_problem

    value = getattr(settings, "AUDIT_CHECKPOINT_PERIOD_S", DEFAULT_PERIOD_S)
    problem = period_setting_problem(value)
    return [checks.Error(problem, id="reconciliation.E001")] if problem else []


def queue_sla_check(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """``QUEUE_SLA_HOURS`` ("stuck=4,ambiguous=2") and ``QUEUE_SLA_DEFAULT_HOURS`` name
    known queues and positive hours; ``SUPERVISOR_DIGEST_HOUR`` is an hour of the day."""
    from django.conf import settings

    from reconciliation.casework.notifications import DEFAULT_SLA_HOURS, sla_setting_problem

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

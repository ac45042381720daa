from django.apps import AppConfig
from django.core import checks


class ReconciliationConfig(AppConfig):
    name = "reconciliation"
    verbose_name = "Pledge reconciliation"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        checks.register(audit_checkpoint_period_check)
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

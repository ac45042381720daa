import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
application = get_wsgi_application()

# gunicorn runs no system checks: refuse to serve, here, with a configuration that
# differs from the one recorded in DynamoDB (reconciliation/ops/config.py).
from reconciliation.ops.config import config_refuse_start  # noqa: E402

config_refuse_start()

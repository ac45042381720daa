import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
application = get_asgi_application()

# As dashboard/wsgi.py: no system checks run here, so refuse to serve a configuration
# that differs from the one recorded in DynamoDB (reconciliation/ops/config.py).
from reconciliation.ops.config import config_refuse_start  # noqa: E402

config_refuse_start()

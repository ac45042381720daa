"""Settings for the test suite: production settings, reached over plain HTTP.

The test client speaks HTTP, so HTTPS redirects and secure-only cookies are off here;
everything else is exactly dashboard.settings. The production profile itself is checked
by ``manage.py check --deploy`` in tests/dashboard/test_security.py.
"""

import os

os.environ.setdefault("DJANGO_HTTPS", "0")

from dashboard.settings import *  # noqa: E402,F403

"""Django settings, read from the environment (docs/configuration.md).

Every variable has a default that runs locally; production sets at least
``DJANGO_SECRET_KEY``, ``DJANGO_ALLOWED_HOSTS`` and ``AUDIT_SIGNING_KEY``.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url
from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else default


def _local_secret(name: str, folder: Path = VAR_DIR) -> str:
    """A random secret kept in ``var/`` so a local run needs no configuration.

    Production passes the value in the environment instead; the file is never
    committed (``var/`` is ignored) and is readable by its owner only.

    ``make run`` starts web, worker and beat at once on a fresh machine, so the
    file is written whole under a private name and then linked into place: the
    first link wins, the others read the winner's key, and nobody ever reads a
    half-written file.
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if not path.exists():
        fd, draft = tempfile.mkstemp(prefix=f".{name}.", dir=folder)  # mode 0600
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_urlsafe(50))
            os.link(draft, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(draft)
    return path.read_text().strip()


DEBUG = env_bool("DJANGO_DEBUG", False)
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or _local_secret("secret_key")
ALLOWED_HOSTS = [
    h.strip()
    for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",")
    if h.strip()
]

INSTALLED_APPS = [
    # First, so its `runserver` wins: refused on anything but demo data (it takes
    # whitenoise's runserver_nostatic's place; docs/security.md).
    "dashboard.devserver",
    # Before django.contrib.auth, so its `changepassword` wins: audited, and it ends the
    # account's sessions like every password set (dashboard/accounts/passwords.py).
    "dashboard.accounts",
    # /admin/ (dashboard/tenancy/admin.py, superusers only); no autodiscovery: dashboard.urls.
    "django.contrib.admin.apps.SimpleAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "axes",
    "csp",
    "django_otp",
    "django_otp.plugins.otp_totp",
    "django_otp.plugins.otp_static",
    "django_otp_webauthn",  # passkeys (dashboard/accounts/passkeys.py)
    "reconciliation",
    # Tenants, tokens, funds, endpoints: read by the API and the staff pages alike.
    "dashboard.tenancy",
    "dashboard.api",
    "dashboard.staff",
    # The project's own: the models' history before the faces held them, template tags.
    "dashboard",
]

MIDDLEWARE = [
    # dashboard.staff_only.*: the staff pages' middleware, skipped on /api/ (its docstring).
    # Outermost: every answer on /api/ says no-store, also those other middleware make.
    "dashboard.api.headers.ApiNoStoreMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "dashboard.staff_only.WhiteNoiseMiddleware",
    "dashboard.server_timing.ServerTimingMiddleware",  # DynamoDB calls per request
    "dashboard.staff_only.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "dashboard.staff_only.AuthenticationMiddleware",
    # Times on pages show in the signed-in person's zone (their profile).
    "dashboard.staff_only.TimeZoneMiddleware",
    # request.user.is_verified(): signed in with a second factor in this session.
    "dashboard.staff_only.OTPMiddleware",
    "dashboard.staff_only.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "dashboard.staff_only.HtmxMiddleware",
    "dashboard.staff_only.BackgroundUnavailableMiddleware",
    # DynamoDB unreachable or swamped: a 503 page naming the case store, never a 500.
    "dashboard.store_unavailable.StoreUnavailableMiddleware",
    "dashboard.auth.CorrelationIdMiddleware",
    "dashboard.staff_only.SessionTimeoutMiddleware",
    "dashboard.staff_only.SecondFactorMiddleware",
    # The profile's list of one's sessions: device, address, last seen (once a minute).
    "dashboard.staff_only.StaffSessionMiddleware",
    # Last, as django-axes requires: it turns a lockout into the locked-out response.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "dashboard.urls"
WSGI_APPLICATION = "dashboard.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "dashboard.auth.role_context",
            ],
        },
    }
]

# Each gunicorn thread keeps its connection for a minute; one the server has ended since (a
# PostgreSQL restart or failover, an idle timeout) is checked and replaced before a request
# uses it, instead of failing that request with a 500.
DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'db.sqlite3'}",
        conn_max_age=60,
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several gunicorn processes of 8 threads each write one file. SQLite's default
    # (DEFERRED) transaction reads first and asks for the write lock later; when another
    # connection holds it, SQLite answers "database is locked" at once instead of
    # waiting, since waiting could deadlock two upgraders. IMMEDIATE takes the write lock
    # at BEGIN, where the busy timeout applies, so writers queue instead of failing; and
    # since a transaction that holds the lock from its start is serialised whole, it also
    # gives what select_for_update asks for (SQLite ignores FOR UPDATE). WAL lets readers
    # go on beside the one writer; synchronous=NORMAL is WAL's durable-on-checkpoint mode.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    # First: refuses locked-out username+address pairs before any password check.
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_URL = "login"  # URL names (resolve_url): the paths are in the URLconfs
# A second factor (TOTP, django-otp) for the roles that approve and audit; finance staff
# may enrol too, and then must use it. Off only in debug, or on purpose.
STAFF_MFA_REQUIRED = env_bool("STAFF_MFA_REQUIRED", not DEBUG)
# Passkeys (dashboard/accounts/passkeys.py): the relying party is the host pages are served from.
OTP_WEBAUTHN_RP_ID_CALLABLE = "dashboard.accounts.passkeys.rp_id"
OTP_WEBAUTHN_RP_NAME = "Pledge reconciliation"
OTP_WEBAUTHN_HELPER_CLASS = "dashboard.accounts.passkeys.Helper"
OTP_WEBAUTHN_ALLOW_PASSWORDLESS_LOGIN = False
# The origins the allowed hosts are served under (the library's check); each ceremony
# checks the one its page came from (dashboard/accounts/passkeys.py · Helper).
# (over plain HTTP, on a developer's localhost, the page's own http:// origin).
OTP_WEBAUTHN_ALLOWED_ORIGINS = [
    f"https://{host}" for host in ALLOWED_HOSTS if host != "*" and not host.startswith(".")
] or ["https://localhost"]
OTP_TOTP_ISSUER = os.environ.get("STAFF_MFA_ISSUER", "Pledge reconciliation")
LOGIN_REDIRECT_URL = "overview"
LOGOUT_REDIRECT_URL = "login"

# --- Security -----------------------------------------------------------------------------
# HTTPS settings apply whenever debug is off, unless DJANGO_HTTPS=0 says the server is
# reached over plain HTTP on purpose (a local gunicorn, the load test).
HTTPS = not DEBUG and env_bool("DJANGO_HTTPS", True)
SECURE_SSL_REDIRECT = HTTPS
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_HSTS_SECONDS = 31536000 if HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
SECURE_HSTS_PRELOAD = HTTPS
BEHIND_PROXY = env_bool("DJANGO_BEHIND_PROXY", False)
if BEHIND_PROXY:
    # Only when a trusted proxy terminates TLS and always sets this header.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# How many proxies of ours append to X-Forwarded-For in front of Django (1 behind the
# proxy, 0 otherwise: the header is then ignored). The client address for the sign-in
# lockout and audit events is the entry the outermost one added (dashboard.auth).
TRUSTED_PROXY_COUNT = env_int("DJANGO_TRUSTED_PROXY_COUNT", 1 if BEHIND_PROXY else 0)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not the cookie
# A refused form answers a page in the layout saying how to go on (JSON on the API).
CSRF_FAILURE_VIEW = "dashboard.lib.errors.csrf_failure"
# Absolute session lifetime; the idle timeout is enforced by SessionTimeoutMiddleware.
SESSION_COOKIE_AGE = env_int("SESSION_ABSOLUTE_TIMEOUT_S", 8 * 3600)
SESSION_IDLE_TIMEOUT_S = env_int("SESSION_IDLE_TIMEOUT_S", 30 * 60)
SESSION_EXPIRE_AT_BROWSER_CLOSE = True

# Content-Security-Policy: scripts and styles only from this origin (htmx is a local file).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "font-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'"],
    }
}

# Sign-in lockout keyed on username AND address together: address alone would lock out a
# whole office behind one NAT; username alone would let anyone lock out a colleague.
AXES_FAILURE_LIMIT = env_int("AXES_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("AXES_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# Count-then-check (dashboard/accounts/lockout.py): each attempt takes a number from a Redis
# counter first; only those up to the limit are checked, so concurrent guesses get no more.
AXES_HANDLER = "dashboard.accounts.lockout.AtomicLockoutHandler"
SIGNIN_LOCKOUT_PREFIX = os.environ.get("SIGNIN_LOCKOUT_PREFIX", "signin-lockout:")
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_VERBOSE = False
# The client's address, not the proxy's: behind a proxy every client shares its address.
AXES_CLIENT_IP_CALLABLE = "dashboard.auth.client_address"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# whitenoise serves STATIC_ROOT as collectstatic left it (with its pre-compressed copies),
# in debug too: `make run` collects at start, so what it serves is what production serves
# (whitenoise would otherwise read static/ through the finders whenever DEBUG is on).
WHITENOISE_USE_FINDERS = env_bool("WHITENOISE_USE_FINDERS", False)

# plain: one readable line per record; json: one JSON object per record, with its
# structured fields (``dynamo_error_code`` on the write path's DynamoDB errors).
LOG_FORMAT = os.environ.get("LOG_FORMAT", "plain").strip().lower()
if LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be plain or json, not {LOG_FORMAT!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        # python-json-logger: every field a record was given (``extra=``) is a key.
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "{levelname}{name}{message}",
            "style": "{",
            "rename_fields": {"levelname": "level", "name": "logger", "exc_info": "exc"},
            "timestamp": "time",
            # A value JSON cannot hold (Django's request object, say) is written as text.
            "json_default": str,
        },
    },
    "filters": {"refusal": {"()": "dashboard.log_filters.RefusalWithoutTraceback"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "botocore": {"level": "WARNING"},
        "urllib3": {"level": "WARNING"},
        "django.request": {"filters": ["refusal"]},
    },
}

# --- DynamoDB (docs/design.md §3, §4, §9) -------------------------------------------------
DYNAMODB_ENDPOINT_URL = os.environ.get("DYNAMODB_ENDPOINT_URL") or None
AWS_REGION = os.environ.get("AWS_REGION", "us-east-1")
DDB_TABLE_PREFIX = os.environ.get("DDB_TABLE_PREFIX", "pledges-")
# Optional multi-region (docs/regions.md): "us-east-1,eu-west-1" on AWS, or
# "us-east-1=http://127.0.0.1:8001,eu-west-1=http://127.0.0.1:8002" locally. Test-only,
# honoured with fault injection alone: DDB_UNPINNED routes keys to AWS_REGION, not home.
DDB_REGIONS = os.environ.get("DDB_REGIONS", "")
# The region whose keys name no region (docs/regions.md, "One configuration"); one of
# DDB_REGIONS, default the smallest name. Never the order of DDB_REGIONS: that decides
# nothing, so two processes listing the regions differently still agree.
DDB_PRIMARY_REGION = os.environ.get("DDB_PRIMARY_REGION", "")
DDB_UNPINNED = env_bool("DDB_UNPINNED", False)
# A request path gives up within a few seconds: botocore's legacy default would
# give DynamoDB 10 attempts and ~25 s of backoff.
DDB_CONNECT_TIMEOUT_S = float(os.environ.get("DDB_CONNECT_TIMEOUT_S", "1"))
DDB_READ_TIMEOUT_S = float(os.environ.get("DDB_READ_TIMEOUT_S", "2"))
DDB_MAX_ATTEMPTS = env_int("DDB_MAX_ATTEMPTS", 2)
# Batch work (exports, verification, seeding) is not a request path: it may wait longer.
DDB_BATCH_READ_TIMEOUT_S = float(os.environ.get("DDB_BATCH_READ_TIMEOUT_S", "20"))
DDB_BATCH_MAX_ATTEMPTS = env_int("DDB_BATCH_MAX_ATTEMPTS", 5)
# Application-level retry budget for throttling and transaction conflicts.
DDB_APP_RETRY_ATTEMPTS = env_int("DDB_APP_RETRY_ATTEMPTS", 4)
DDB_APP_RETRY_BASE_S = float(os.environ.get("DDB_APP_RETRY_BASE_S", "0.05"))
DDB_APP_RETRY_CAP_S = float(os.environ.get("DDB_APP_RETRY_CAP_S", "1.0"))
# No new application attempt starts once this much of the request's time is spent.
DDB_REQUEST_BUDGET_S = float(os.environ.get("DDB_REQUEST_BUDGET_S", "3.0"))
# Items each fund and currency's running total is spread over. On AWS two commits that
# add to one item at once conflict (TransactionConflict); bench/hot_fund.py chose 32 as
# the fewest that keep a conflict past the retry budget under 1 in 10 000 pledges at one
# web process's peak (docs/benchmarks.md). It may only grow (a total reads shards 0..N-1)
# and it is in the recorded configuration: changing it is a migration (docs/regions.md).
LEDGER_SHARDS = env_int("LEDGER_SHARDS", 32)

CLAIM_PENDING_TTL_S = env_int("CLAIM_PENDING_TTL_S", 60)
# Must exceed the clients' retry ceiling: a replay after this is answered from the
# durable pledge record, never by writing again.
CLAIM_COMPLETED_TTL_S = env_int("CLAIM_COMPLETED_TTL_S", 7 * 24 * 3600)
# A FAILED claim is a cool-off: the key may be re-claimed once it has passed.
CLAIM_FAILED_TTL_S = env_int("CLAIM_FAILED_TTL_S", 30)
STUCK_GRACE_S = env_int("STUCK_GRACE_S", 30)
# TTL deletes a claim this long after its lease/expiry, never sooner (cost control only).
CLAIM_PURGE_AFTER_S = env_int("CLAIM_PURGE_AFTER_S", 7 * 24 * 3600)
OVERRIDE_TTL_S = env_int("OVERRIDE_TTL_S", 24 * 3600)
# How long the intake request log keeps an answer (its TTL: cost control, never
# correctness; reconciliation/claims/request_log.py).
REQUEST_LOG_TTL_S = env_int("REQUEST_LOG_TTL_S", 30 * 24 * 3600)
# The log's entries that no commit carries are buffered per process and written in
# batches off the request path (reconciliation/claims/request_log_buffer.py): at most this
# many wait (a full buffer drops its oldest), written every this many seconds (0: no
# flusher thread; written only when the process stops).
REQUEST_LOG_BUFFER = env_int("REQUEST_LOG_BUFFER", 10_000)
REQUEST_LOG_FLUSH_S = float(os.environ.get("REQUEST_LOG_FLUSH_S", "1"))
AUTO_RESOLVE_COMMITTED = env_bool("AUTO_RESOLVE_COMMITTED", True)
AUDIT_SIGNING_KEY = os.environ.get("AUDIT_SIGNING_KEY") or _local_secret("audit_signing_key")
AUDIT_EXPORT_DIR = Path(os.environ.get("AUDIT_EXPORT_DIR", VAR_DIR / "exports"))
# Signed audit checkpoints cover periods of this many seconds (300..86400, dividing a
# day; checked by reconciliation.E001): the window in which a table writer can still
# rewrite the newest events unseen (docs/audit.md).
AUDIT_CHECKPOINT_PERIOD_S = env_int("AUDIT_CHECKPOINT_PERIOD_S", 3600)
# Outcome volumes are business data: with a token set, /metrics answers only
# "Authorization: Bearer <token>" (the scraper's credential).
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")

# Acknowledgement webhooks (docs/webhooks.md). http:// and loopback addresses are accepted
# as endpoints only in debug or demo (WEBHOOK_ALLOW_LOOPBACK=1): never in production.
WEBHOOK_ALLOW_LOOPBACK = env_bool("WEBHOOK_ALLOW_LOOPBACK", DEBUG)
# A dispatcher holds a pledge's deliveries this long; one that dies mid-send is taken
# over after it. Must exceed the connect plus read timeouts of every endpoint it sends to.
ACK_LEASE_S = env_int("ACK_LEASE_S", 60)
ACK_DISABLE_AFTER_S = env_int("ACK_DISABLE_AFTER_S", 86400)  # a day of failures disables
# After a rotation (rotate_webhook_secret, the admin) the previous signing secret stays
# valid this long: deliveries are signed with both, so a receiver can change at leisure.
WEBHOOK_PREVIOUS_SECRET_S = env_int("WEBHOOK_PREVIOUS_SECRET_S", 86400)
ACK_CONNECT_TIMEOUT_S = float(os.environ.get("ACK_CONNECT_TIMEOUT_S", "3"))
ACK_READ_TIMEOUT_S = float(os.environ.get("ACK_READ_TIMEOUT_S", "10"))
# Multiplies every delay of the retry schedule (reconciliation/acks/schedule.py): 1 in
# production; tests and the reliability run shrink days to seconds (0.01: 57 minutes).
ACK_RETRY_SCALE = float(os.environ.get("ACK_RETRY_SCALE", "1.0"))
# How long dispatch_acks (without --once) waits between passes when no commit wakes it
# (a message on Redis after each commit does: docs/webhooks.md, "Wake-up").
ACK_POLL_S = float(os.environ.get("ACK_POLL_S", "2"))
# Rows of the delivery attempt log (dashboard/tenancy/models.py · DeliveryAttempt) older than this
# are deleted by a daily task: the log is for looking back over an outage, not an archive
# (each resend's audit event is kept with the audit trail).
DELIVERY_ATTEMPT_RETENTION_DAYS = env_int("DELIVERY_ATTEMPT_RETENTION_DAYS", 30)
DELIVERY_ATTEMPT_PRUNE_HOUR = env_int("DELIVERY_ATTEMPT_PRUNE_HOUR", 3)
# Whether a commit publishes that wake-up (best effort; off: the poll alone).
ACK_WAKE = env_bool("ACK_WAKE", True)
# One dispatcher's workers: POSTs (and their records) under way at once, over every
# endpoint; each endpoint has at most its own max_in_flight of them.
ACK_WORKERS = env_int("ACK_WORKERS", 32)
# An endpoint whose last ACK_BREAKER_FAILURES attempts all failed is paused (its circuit
# breaker opens) for ACK_BREAKER_OPEN_S, doubled after each failed trial up to 10 minutes.
ACK_BREAKER_FAILURES = env_int("ACK_BREAKER_FAILURES", 5)
ACK_BREAKER_OPEN_S = float(os.environ.get("ACK_BREAKER_OPEN_S", "30"))

# Funds (docs/design.md §3, §8 add_fund): intake accepts only a tenant's registered funds, each
# in one currency up to its largest single amount. A new tenant starts with DEFAULT_FUNDS,
# a comma list of CODE[:CURRENCY[:MAX]]; a missing currency or maximum takes these.
FUND_DEFAULT_CURRENCY = os.environ.get("FUND_DEFAULT_CURRENCY", "USD")
FUND_DEFAULT_MAX_AMOUNT = os.environ.get("FUND_DEFAULT_MAX_AMOUNT", "1000000")
DEFAULT_FUNDS = os.environ.get("DEFAULT_FUNDS", "GENERAL")

# --- Supervisors' daily e-mail (reconciliation/casework/notifications.py) --------------
# Cases open longer than their queue's SLA are flagged on the overview and the queue pages
# and listed in the e-mail: "stuck=4,ambiguous=2" (URL slugs or queue names, hours);
# queues not named take QUEUE_SLA_DEFAULT_HOURS. Checked at start (reconciliation.E002).
QUEUE_SLA_HOURS = os.environ.get("QUEUE_SLA_HOURS", "")
QUEUE_SLA_DEFAULT_HOURS = os.environ.get("QUEUE_SLA_DEFAULT_HOURS", "4")
# The hour (UTC) the e-mail goes out each day (reconciliation.E003: 0..23).
SUPERVISOR_DIGEST_HOUR = env_int("SUPERVISOR_DIGEST_HOUR", 7)
# Where the e-mail's links point.
SITE_URL = os.environ.get("SITE_URL", "http://127.0.0.1:8000")
# How long the overview's summary (ageing, oldest, past SLA, latest events) is shown to
# every viewer as fresh; once older, or once any queue's open count changed, it is shown
# with its age and one viewer queues its recomputation on a worker (overview_summary_task;
# reconciliation/casework/overview.py). No view computes it itself. 0: never fresh, every
# view asks (at most one ask per 10 s).
OVERVIEW_SUMMARY_MAX_AGE_S = env_int("OVERVIEW_SUMMARY_MAX_AGE_S", 30)
# Django's mail settings; the console backend prints mail (what `make run` uses).
EMAIL_BACKEND = os.environ.get(
    "EMAIL_BACKEND",
    "django.core.mail.backends.console.EmailBackend"
    if DEBUG
    else "django.core.mail.backends.smtp.EmailBackend",
)
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10)
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "pledge-reconciliation@localhost")

# Intake rate limit per tenant (dashboard/api/intake_limit.py), a token bucket in Redis:
# refilled at INTAKE_RATE_PER_S, holding at most INTAKE_BURST; a tenant's own values
# (Tenant.intake_rate_per_s, .intake_burst) override these. Redis unreachable: fail open.
INTAKE_RATE_PER_S = float(os.environ.get("INTAKE_RATE_PER_S", "100"))
INTAKE_BURST = env_int("INTAKE_BURST", 200)
INTAKE_RATE_LIMIT_PREFIX = os.environ.get("INTAKE_RATE_LIMIT_PREFIX", "intake-rate:")

# Fault injection is honoured only in debug or with an explicit opt-in (docs/design.md §11).
FAULT_INJECTION = os.environ.get("FAULT_INJECTION", "")
ALLOW_FAULT_INJECTION = DEBUG or env_bool("ALLOW_FAULT_INJECTION", False)
# Where it is, the simulation app attaches it to the DynamoDB clients and the tasks
# (reconciliation/simulation/apps.py); a production process never loads fault code.
if ALLOW_FAULT_INJECTION:
    INSTALLED_APPS = [*INSTALLED_APPS, "reconciliation.simulation"]

# --- Redis and Celery -----------------------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
CELERY_BROKER_URL = REDIS_URL
# kombu's Redis transport, keeping held (countdown) tasks through a Redis restart instead
# of exiting the worker (dashboard/celery_broker.py).
CELERY_BROKER_TRANSPORT = "dashboard.celery_broker:Transport"
# Every Redis call made on a request path is bounded: a refused or hung Redis
# costs a staff request a few seconds and a clear page, never a 500 or minutes. The
# result backend never subscribes on publish (dashboard/celery_results.py).
CELERY_RESULT_BACKEND = f"dashboard.celery_results:RequestSafeRedisBackend+{REDIS_URL}"
CELERY_REDIS_SOCKET_CONNECT_TIMEOUT = 2
CELERY_REDIS_SOCKET_TIMEOUT = 3
CELERY_BROKER_CONNECTION_TIMEOUT = 2
# One quick retry of a publish, then the caller hears OperationalError (default: 3).
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.2,
}
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
# Every countdown and time limit stays below the visibility timeout, or Redis would
# hand a still-running task to a second worker.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": 3600,
    # Above the transport's 1 s BRPOP, so an idle worker is never cut off by them.
    "socket_timeout": 3,
    "socket_connect_timeout": 2,
}
CELERY_TASK_SOFT_TIME_LIMIT = 300
CELERY_TASK_TIME_LIMIT = 360
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULER = "redbeat.RedBeatScheduler"
CELERY_REDBEAT_REDIS_URL = REDIS_URL
CELERY_REDBEAT_KEY_PREFIX = os.environ.get("REDBEAT_KEY_PREFIX", "redbeat:pledges:")
CELERY_REDBEAT_LOCK_TIMEOUT = 300
# Beat's own connection: the broker's timeouts, without the broker's visibility_timeout.
CELERY_REDBEAT_REDIS_OPTIONS = {"socket_timeout": 3, "socket_connect_timeout": 2}
SWEEP_INTERVAL_S = env_int("SWEEP_INTERVAL_S", 30)
# The ledger drift check (casework/drift/): interval, settle window, confirmation pause.
LEDGER_DRIFT_INTERVAL_S = env_int("LEDGER_DRIFT_INTERVAL_S", 300)
LEDGER_DRIFT_SETTLE_S = env_int("LEDGER_DRIFT_SETTLE_S", 900)
LEDGER_DRIFT_CONFIRM_MS = env_int("LEDGER_DRIFT_CONFIRM_MS", 2000)


def _every(task: str, seconds: float) -> dict[str, Any]:
    """A beat entry run every ``seconds``; a run the workers have not started by the time
    the next is due expires, so a backlog never piles up runs of the same task."""
    return {"task": task, "schedule": float(seconds), "options": {"expires": float(seconds)}}


CELERY_BEAT_SCHEDULE: dict[str, dict[str, Any]] = {
    "sweep": _every("reconciliation.tasks.cases.sweep_task", SWEEP_INTERVAL_S),
    "expire-overrides": _every("reconciliation.tasks.cases.expire_overrides_task", 60),
    "supervisor-digest": {
        # Daily: override requests waiting and cases past SLA, e-mailed to supervisors.
        "task": "reconciliation.tasks.cases.supervisor_digest_task",
        "schedule": crontab(minute=0, hour=SUPERVISOR_DIGEST_HOUR),
        "options": {"expires": 3600.0},
    },
    "ledger-drift": _every("reconciliation.tasks.cases.ledger_drift_task", LEDGER_DRIFT_INTERVAL_S),
    # Every 5 minutes; signs each finished period's checkpoint once, else a no-op.
    "audit-checkpoint": _every("reconciliation.tasks.audit.audit_checkpoint", 300),
    "delivery-attempts-prune": {
        # Daily: the attempt log's rows past DELIVERY_ATTEMPT_RETENTION_DAYS.
        "task": "dashboard.tasks.delivery_attempts_prune_task",
        "schedule": crontab(minute=30, hour=DELIVERY_ATTEMPT_PRUNE_HOUR),
        "options": {"expires": 3600.0},
    },
}

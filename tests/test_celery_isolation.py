"""The guard in ``tests/conftest.py`` that keeps one test's Celery app from becoming
every later test's ``current_app`` (a reliability run once failed that way)."""

from __future__ import annotations

from celery import Celery, current_app

from dashboard.celery import app
from tests.conftest import celery_app_leaked


def test_a_helper_app_left_current_is_reported_and_put_back():
    helper = Celery("leaky-helper", broker="redis://127.0.0.1:1/0")  # set_as_current=True
    assert current_app._get_current_object() is helper

    leaked = celery_app_leaked(app)

    assert leaked is not None and "leaky-helper" in leaked
    assert current_app._get_current_object() is app


def test_a_helper_app_built_aside_is_no_leak():
    Celery("tidy-helper", broker="redis://127.0.0.1:1/0", set_as_current=False)

    assert celery_app_leaked(app) is None
    assert current_app._get_current_object() is app

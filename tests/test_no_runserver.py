"""Nothing the project starts runs Django's development server.

``runserver`` takes a malformed ``Content-Length`` at its word and reads the rest of the
body as the next request line, so a donor reference ends up in the log. ``make run`` and
the Procfile serve with gunicorn; ``manage.py runserver`` refuses unless it runs on demo
data only (debug, ``DEMO_MODE=1``, DynamoDB Local on this machine)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reconciliation.dynamo.local import free_port

ROOT = Path(__file__).resolve().parent.parent
# What the project runs or tells people to run: scripts, process files, docs.
SCRIPTS = [
    ROOT / "Makefile",
    ROOT / "Procfile",
    ROOT / "README.md",
    *sorted((ROOT / "bin").rglob("*")),
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted(p for p in ROOT.rglob("*.sh") if ".venv" not in p.parts),
]
# "runserver" as a command (not a file name such as runserver.py or a test's name).
MENTION = re.compile(r"(?<![\w/])runserver(?![\w.])")
# Prose that names it only to warn against it says so within its sentence.
WARNING_WORDS = re.compile(r"\b(never|not|refuses?|instead of|unless)\b", re.I)
NEAR = 120  # characters either side of a mention


def test_no_script_or_doc_starts_runserver():
    """Every mention of ``runserver`` in the scripts, the Procfile, the Makefile and the
    docs is prose warning against it, never an invocation."""
    offenders = []
    for path in SCRIPTS:
        if not path.is_file():
            continue
        text = path.read_text()
        prose = path.suffix == ".md"
        for match in MENTION.finditer(text):
            around = text[max(0, match.start() - NEAR) : match.end() + NEAR]
            line_start = text.rfind("\n", 0, match.start()) + 1
            # In a script or process file only a comment may name it (and warn).
            in_comment = "#" in text[line_start : match.start()]
            if not WARNING_WORDS.search(around) or not (prose or in_comment):
                line = text.count("\n", 0, match.start()) + 1
                offenders.append(f"{path.relative_to(ROOT)}:{line}: {around.strip()!r}")
    assert offenders == []


def test_make_run_and_the_procfile_serve_with_gunicorn():
    procfile = (ROOT / "Procfile").read_text()
    assert re.search(r"^web: gunicorn ", procfile, re.M)
    assert "gunicorn" in (ROOT / "bin" / "run.py").read_text()


def _runserver(**env_overrides: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DEMO_"))}
    env.update(DJANGO_SETTINGS_MODULE="dashboard.settings_test", **env_overrides)
    address = f"127.0.0.1:{free_port()}"  # loopback only, should the guard ever let it start
    try:
        return subprocess.run(
            [sys.executable, "manage.py", "runserver", address, "--noreload", "--skip-checks"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("manage.py runserver started serving instead of refusing")


@pytest.mark.parametrize(
    "env",
    [
        {"DJANGO_DEBUG": "0"},
        {"DJANGO_DEBUG": "1"},  # debug, but not declared demo data
        {"DJANGO_DEBUG": "0", "DEMO_MODE": "1"},
        # demo mode against a DynamoDB that is not on this machine: real data
        {"DJANGO_DEBUG": "1", "DEMO_MODE": "1", "DYNAMODB_ENDPOINT_URL": ""},
        {
            "DJANGO_DEBUG": "1",
            "DEMO_MODE": "1",
            "DYNAMODB_ENDPOINT_URL": "https://dynamodb.eu-west-1.amazonaws.com",
        },
    ],
    ids=["production", "debug-only", "demo-without-debug", "demo-on-aws", "demo-remote-url"],
)
def test_runserver_refuses_anything_but_demo_data(env):
    """``manage.py runserver`` exits at once with a message naming gunicorn, unless it is
    debug with DEMO_MODE=1 against DynamoDB Local on loopback."""
    result = _runserver(**env)
    assert result.returncode != 0
    assert "make run" in result.stderr and "gunicorn" in result.stderr, result.stderr


def test_runserver_guard_admits_demo_data_on_dynamodb_local():
    """The guard itself (no server started): debug, DEMO_MODE=1 and a loopback endpoint
    pass; the same with DEMO_MODE unset does not."""
    from dashboard.devserver.management.commands.runserver import refusal

    local = "http://127.0.0.1:8001"
    assert refusal(debug=True, demo_mode="1", endpoints=[local, "http://localhost:8002"]) is None
    assert refusal(debug=True, demo_mode="", endpoints=[local])
    assert refusal(debug=True, demo_mode="1", endpoints=[None])

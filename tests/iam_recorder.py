"""The IAM recorder: every DynamoDB call the code sends during the tests, checked against
the policy ``manage.py iam_policy`` prints (reconciliation/dynamo/iam.py).

Every client ``build_client`` makes while the tests run carries a
``before-parameter-build`` hook that notes what IAM would authorise for the call:
``(action, table, index)``, the table mapped back from the test's prefix to its logical
name, with the first place in the code that made it. A call counts when the innermost
frame of ours that sent it is the code's own (``reconciliation/``, ``dashboard/``):
the tests' own reads and writes, and the tooling that only ever runs beside them
(``TOOLING``), are no part of what a deployment must be granted.

When the session ends, the calls are checked against the policy for the reference
configuration (prefix ``pledges-``, ``us-east-1``, account ``123456789012``, the one
docs/configuration.md prints):

- **outside**: a call the policy does not allow. Always checked: any subset of the
  suite can find one.
- **unused**: a grant (action on one ARN) no call used. Checked only after a whole run
  (:func:`whole_run_problem`): no paths, ``-k``, ``--deselect`` or other ``-m`` than
  the Makefile's ``not reliability``, nothing stopped early, no test failed, no worker
  lost, and no test skipped for want of DynamoDB Local. A partial run could not have
  used everything.

Under pytest-xdist each worker sends what it noted to the controller with its
``workeroutput`` when it finishes (xdist's channel from worker to controller: no files
to clean up, none left over from an earlier run), and the controller checks the union.
Either finding fails the run (exit status 1) and is listed in the terminal summary.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from reconciliation.dynamo.client import TableNames
from reconciliation.dynamo.iam import Need, Resource, call_needs, policy_document

ROOT = Path(__file__).resolve().parent.parent
REFERENCE_PREFIX = "pledges-"
REFERENCE_REGION = "us-east-1"
REFERENCE_ACCOUNT = "123456789012"
WORKEROUTPUT_KEY = "iam_recorded"

# Code that runs only beside the tests (or the fault explorer and simulator, which only
# run where fault injection is allowed), never in a deployment. A path names a file or
# a folder; ``path::qualname`` one function of a production module that exists for
# tests and tooling alone.
TOOLING = (
    "tests/",
    "bench/",
    "reconciliation/simulation/explorer/",
    "reconciliation/simulation/simulate.py",
    "reconciliation/simulation/invariants.py",
    "reconciliation/simulation/hands_invariants.py",
    "reconciliation/simulation/ack_invariants.py",
    "reconciliation/simulation/replicator.py",
    "reconciliation/simulation/replicator_streams.py",
    # Drops scratch tables (tests, the explorer's oracle): nothing deletes a table in
    # production.
    "reconciliation/dynamo/tables.py::drop_tables",
    # BatchWriteItem overwrites unconditionally: for seeding tests and benchmarks, never
    # the append path, so the audit trail is never granted it.
    "reconciliation/audit/repository.py::AuditRepository.batch_put",
)

LOGICAL_NAMES = sorted((f.name for f in fields(TableNames)), key=len, reverse=True)


def logical_table(name: str) -> str | None:
    """The logical table a physical name is (``p1a2b3c4d5e-cases`` → ``cases``)."""
    return next((n for n in LOGICAL_NAMES if name.endswith(n)), None)


@dataclass(frozen=True)
class Recorded:
    """One distinct authorisation the code needed, with where it first came from."""

    action: str
    table: str
    index: str | None
    origin: str

    @property
    def key(self) -> tuple[str, str, str | None]:
        return (self.action, self.table, self.index)


def _tooling(path: str, qualname: str) -> bool:
    for entry in TOOLING:
        where, _, function = entry.partition("::")
        if function:
            if path == where and qualname == function:
                return True
        elif path == where or (where.endswith("/") and path.startswith(where)):
            return True
    return False


_project_paths: dict[str, str | None] = {}


def _project_path(filename: str) -> str | None:
    """``filename`` relative to the repository, or ``None`` outside it (libraries)."""
    if filename not in _project_paths:
        if filename.startswith("<"):  # "<string>", "<frozen …>": no file of ours
            _project_paths[filename] = None
            return None
        try:
            relative = Path(filename).resolve().relative_to(ROOT).as_posix()
        except ValueError:
            relative = None
        if relative is not None and relative.startswith(".venv/"):
            relative = None
        _project_paths[filename] = relative
    return _project_paths[filename]


def _project_frames(frame: FrameType | None) -> Iterator[tuple[str, FrameType]]:
    while frame is not None:
        path = _project_path(frame.f_code.co_filename)
        if path is not None:
            yield path, frame
        frame = frame.f_back


def code_origin(frame: FrameType | None) -> str | None:
    """``path:line qualname`` of the innermost frame of ours (and of its caller, which
    says more when the first is a helper such as ``batch_get``), when that frame is the
    code's own and not tooling; ``None`` for a call the tests or tooling made."""
    places = []
    for path, each in _project_frames(frame):
        qualname = each.f_code.co_qualname
        if not places and _tooling(path, qualname):
            return None
        places.append(f"{path}:{each.f_lineno} {qualname}")
        if len(places) == 2:
            break
    return " <- ".join(places) or None


@dataclass
class Recorder:
    """What the code asked of DynamoDB in this process."""

    seen: dict[tuple[str, str, str | None], Recorded] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, params: Mapping[str, Any], model: Any, **kwargs: Any) -> None:
        """The ``before-parameter-build.dynamodb`` hook: fires once per call (not per
        retry), before anything is sent."""
        origin = code_origin(sys._getframe(1))
        if origin is None:
            return
        for need in call_needs(model.name, params):
            self.add(need, origin)

    def add(self, need: Need, origin: str) -> None:
        table = logical_table(need.table) or need.table
        entry = Recorded(need.action, table, need.index, origin)
        with self.lock:
            self.seen.setdefault(entry.key, entry)

    def export(self) -> list[list[str | None]]:
        with self.lock:
            return [[r.action, r.table, r.index, r.origin] for r in self.seen.values()]

    def merge(self, exported: Iterable[list[str | None]]) -> None:
        for action, table, index, origin in exported:
            entry = Recorded(str(action), str(table), index, str(origin))
            with self.lock:
                self.seen.setdefault(entry.key, entry)


def install(recorder: Recorder) -> None:
    """Hook every client ``build_client`` makes from now on (``dynamodb_client`` looks
    it up at each call, so the wrapper sees every shared client)."""
    from reconciliation.dynamo import client as client_module

    original = client_module.build_client

    def recording_build_client(*args: Any, **kwargs: Any) -> Any:
        built = original(*args, **kwargs)
        built.meta.events.register("before-parameter-build.dynamodb", recorder.note)
        return built

    client_module.build_client = recording_build_client  # type: ignore[assignment]
    # A module that imported the name before this ran (the drill's fault-injecting
    # clients are built by reconciliation.simulation.fault_hooks) holds the original.
    for name, module in list(sys.modules.items()):
        if name.startswith("reconciliation.") and getattr(module, "build_client", None) is original:
            module.build_client = recording_build_client  # type: ignore[attr-defined]


# --- the check ---------------------------------------------------------------------------


def _matches(pattern: str, value: str) -> bool:
    """IAM's wildcards: ``*`` any run of characters, ``?`` one."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value) is not None


def _arn(entry: Recorded) -> str:
    return Resource(entry.table, entry.index).arn(
        region=REFERENCE_REGION, account=REFERENCE_ACCOUNT, prefix=REFERENCE_PREFIX
    )


def _as_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _allows(statement: Mapping[str, Any], action: str, arn: str) -> bool:
    return (
        statement.get("Effect") == "Allow"
        and any(_matches(a, f"dynamodb:{action}") for a in _as_list(statement["Action"]))
        and any(_matches(r, arn) for r in _as_list(statement["Resource"]))
    )


@dataclass(frozen=True)
class UnusedGrant:
    sid: str
    action: str
    arn: str


@dataclass
class PolicyFindings:
    outside: list[Recorded] = field(default_factory=list)
    unused: list[UnusedGrant] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.outside or self.unused)

    def lines(self) -> list[str]:
        out = []
        for r in self.outside:
            where = f"{r.table}.{r.index}" if r.index else r.table
            out.append(f"outside the policy: dynamodb:{r.action} on {where} ({r.origin})")
        for u in self.unused:
            out.append(
                f"granted, never used by any test: {u.action} on {u.arn} (statement {u.sid})"
            )
        return out


def policy_check(
    policy: Mapping[str, Any], recorded: Iterable[Recorded], *, check_unused: bool
) -> PolicyFindings:
    """Every recorded call against ``policy`` (a document for the reference
    configuration), and, with ``check_unused``, every grant (one action on one resource)
    against the calls."""
    statements = policy["Statement"]
    calls = [
        (r, f"dynamodb:{r.action}", _arn(r))
        for r in sorted(recorded, key=lambda r: (r.table, r.index or "", r.action))
    ]
    findings = PolicyFindings()
    for r, _, arn in calls:
        if not any(_allows(s, r.action, arn) for s in statements):
            findings.outside.append(r)
    if not check_unused:
        return findings
    for s in statements:
        for action in _as_list(s["Action"]):
            for resource in _as_list(s["Resource"]):
                if not any(
                    _matches(action, called) and _matches(resource, arn) for _, called, arn in calls
                ):
                    findings.unused.append(UnusedGrant(s.get("Sid", "?"), action, resource))
    return findings


def reference_policy() -> dict[str, Any]:
    return policy_document(
        prefix=REFERENCE_PREFIX, regions=[REFERENCE_REGION], account=REFERENCE_ACCOUNT
    )


# --- the plugin ----------------------------------------------------------------------------

MAKEFILE_MARKEXPR = ("", "not reliability")
# How tests/conftest.py skips a test whose engine did not start (outside CI).
ENGINE_SKIP = "DynamoDB Local unavailable"


def whole_run_problem(config: pytest.Config, session: pytest.Session) -> str | None:
    """Why this run is not the whole suite (so grants cannot be checked for use), or
    ``None`` when it is."""
    option = config.option
    if config.args_source != pytest.Config.ArgsSource.TESTPATHS:
        return "test paths were named"
    if option.keyword:
        return "-k selected tests"
    if getattr(option, "deselect", None):
        return "--deselect"
    if option.markexpr not in MAKEFILE_MARKEXPR:
        return f"-m {option.markexpr!r}"
    if session.shouldstop or session.shouldfail:
        return "the run stopped early"
    if session.testsfailed:
        return f"{session.testsfailed} tests failed"
    return None


class IamRecorderPlugin:
    """Collects the workers' calls on the controller (or this process's, without
    xdist), checks them when the session ends and fails the run on a finding."""

    def __init__(self, config: pytest.Config, recorder: Recorder):
        self.config = config
        self.recorder = recorder
        self.incomplete: list[str] = []
        self.findings: PolicyFindings | None = None
        self.summary = ""

    @property
    def is_worker(self) -> bool:
        return hasattr(self.config, "workerinput")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and ENGINE_SKIP in str(report.longrepr):
            self.incomplete.append(f"a test was skipped: {ENGINE_SKIP}")

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        if error:
            self.incomplete.append(f"worker {node.gateway.id} was lost")
        self.recorder.merge(getattr(node, "workeroutput", {}).get(WORKEROUTPUT_KEY, []))

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.is_worker:
            self.config.workeroutput[WORKEROUTPUT_KEY] = self.recorder.export()  # type: ignore[attr-defined]
            return
        if self.config.option.collectonly:
            return
        problem = whole_run_problem(self.config, session) or next(iter(self.incomplete), None)
        self.findings = policy_check(
            reference_policy(), self.recorder.seen.values(), check_unused=problem is None
        )
        self.summary = f"IAM policy: {len(self.recorder.seen)} distinct calls recorded; " + (
            "grants checked for use" if problem is None else f"grants not checked ({problem})"
        )
        if self.findings.failed:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.findings is None:
            return
        if self.findings.failed:
            terminalreporter.section("IAM policy (manage.py iam_policy)", red=True)
            for line in self.findings.lines():
                terminalreporter.write_line(line)
            terminalreporter.write_line(
                "Add what the code needs to reconciliation/dynamo/iam.py, or remove what it "
                "no longer does (tests/iam_recorder.py says how calls are counted)."
            )
        terminalreporter.write_line(self.summary)

"""The IAM recorder (tests/iam_recorder.py): it notes the code's DynamoDB calls and not the
tests' own, and its check reports a call outside the policy and a grant no call used,
and fails the run on either."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from reconciliation.dynamo.iam import grants
from tests.iam_recorder import (
    REFERENCE_PREFIX,
    ROOT,
    TOOLING,
    IamRecorderPlugin,
    Recorded,
    Recorder,
    logical_table,
    policy_check,
    reference_policy,
    whole_run_problem,
)


def _every_grant_used() -> list[Recorded]:
    """One call for each action on each resource the policy grants."""
    return [
        Recorded(str(action), r.table, r.index, "reconciliation/x.py:1 f")
        for g in grants()
        for action in g.actions
        for r in g.resources
    ]


def test_a_call_outside_the_policy_and_a_grant_never_used_are_both_reported():
    """Break the invariant on purpose both ways: a DeleteItem on the audit trail (which
    the policy never grants) and no call at all of the ledger's DeleteItem (which it
    does) are each named, with where the call came from and which statement grants."""
    calls = [r for r in _every_grant_used() if (r.action, r.table) != ("DeleteItem", "ledger")]
    calls.append(Recorded("DeleteItem", "audit_events", None, "reconciliation/audit/x.py:7 purge"))
    findings = policy_check(reference_policy(), calls, check_unused=True)
    assert findings.failed
    assert findings.lines() == [
        "outside the policy: dynamodb:DeleteItem on audit_events "
        "(reconciliation/audit/x.py:7 purge)",
        "granted, never used by any test: dynamodb:DeleteItem on "
        "arn:aws:dynamodb:us-east-1:123456789012:table/pledges-ledger (statement ServeLedger)",
    ]


def test_a_query_of_an_index_is_checked_against_the_index_arn():
    """A Query of an index the policy does not name is outside it, though the table's
    own Query (audit_events) is granted; so is a Scan of an index."""
    calls = [
        Recorded("Query", "audit_events", "by_stream", "reconciliation/a.py:1 f"),
        Recorded("Query", "cases", "by_intent", "reconciliation/a.py:2 g"),
        Recorded("Scan", "cases", "by_intent", "reconciliation/a.py:3 h"),
    ]
    findings = policy_check(reference_policy(), calls, check_unused=False)
    assert [(r.action, r.table, r.index) for r in findings.outside] == [
        ("Query", "audit_events", "by_stream"),
        ("Scan", "cases", "by_intent"),
    ]


def test_calls_that_use_every_grant_and_stay_inside_report_nothing():
    """The check's quiet case: the policy's own grants, each made once."""
    findings = policy_check(reference_policy(), _every_grant_used(), check_unused=True)
    assert not findings.failed and findings.lines() == []


def test_a_partial_run_checks_the_calls_but_not_whether_grants_were_used():
    """With ``check_unused`` off (a subset of the suite) a grant nobody used is fine, and a
    call outside the policy is still reported."""
    calls = [Recorded("Scan", "audit_events", None, "reconciliation/a.py:1 f")]
    findings = policy_check(reference_policy(), calls, check_unused=False)
    assert findings.unused == []
    assert [r.action for r in findings.outside] == ["Scan"]


def test_logical_tables_are_found_behind_any_test_prefix():
    """Per-test prefixes (tests/table_pool.py) map back to the logical table."""
    assert logical_table("p1a2b3c4d5e-idempotency_keys") == "idempotency_keys"
    assert logical_table("fresh-p1a2-audit_events") == "audit_events"
    assert logical_table(f"{REFERENCE_PREFIX}pledges") == "pledges"
    assert logical_table("scratch") is None


def test_the_recorder_notes_the_codes_calls_and_not_the_tests_own(ddb, settings):
    """On a client the code uses: a repository's GetItem and an index Query are noted
    with where the code sent them; the test's own GetItem and the tooling's
    BatchWriteItem (AuditRepository.batch_put, for seeding only) are not."""
    from reconciliation.audit.repository import AuditRepository
    from reconciliation.claims.repository import ClaimRepository
    from reconciliation.dynamo.tables import donor_key_query
    from reconciliation.stores import first_store

    recorder = Recorder()
    events = ddb.client.meta.events
    events.register("before-parameter-build.dynamodb", recorder.note)
    try:
        store = first_store()
        ddb.client.get_item(TableName=ddb.tables.cases, Key={"case_id": {"S": "C-1"}})
        ClaimRepository(store).get("acme#create_pledge#k1")
        donor_key_query(ddb.client, ddb.tables.pledges, "D-1", key="intent_id", limit=1)
        AuditRepository(store).batch_put([{"stream": "SYSTEM", "seq": 1, "hash": "h"}])
    finally:
        events.unregister("before-parameter-build.dynamodb", recorder.note)
    noted = {key: r.origin for key, r in recorder.seen.items()}
    assert set(noted) == {
        ("GetItem", "idempotency_keys", None),
        ("Query", "pledges", "by_donor_key"),
    }
    assert noted[("GetItem", "idempotency_keys", None)].startswith(
        "reconciliation/claims/repository.py:"
    )
    assert noted[("Query", "pledges", "by_donor_key")].startswith(
        "reconciliation/dynamo/tables.py:"
    )


def _defined(path: Path, qualname: str) -> bool:
    tree = ast.parse(path.read_text())
    body: list[ast.stmt] = tree.body
    for part in qualname.split("."):
        node = next(
            (n for n in body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part),
            None,
        )
        if node is None:
            return False
        body = node.body
    return True


@pytest.mark.parametrize("entry", TOOLING)
def test_every_tooling_entry_names_code_that_exists(entry):
    """A moved or renamed tooling module would make its calls count as the code's (and
    fail the check); a stale entry would hide nothing, so each must resolve."""
    path, _, qualname = entry.partition("::")
    target = ROOT / path
    assert target.exists(), f"{path} does not exist"
    if qualname:
        assert _defined(target, qualname), f"{path} defines no {qualname}"


def _config(*, args_source=pytest.Config.ArgsSource.TESTPATHS, **option: Any) -> Any:
    defaults: dict[str, Any] = {
        "keyword": "",
        "deselect": None,
        "markexpr": "not reliability",
        "collectonly": False,
    }
    return SimpleNamespace(args_source=args_source, option=SimpleNamespace(**defaults | option))


def _session(**overrides: Any) -> Any:
    defaults = {"shouldstop": False, "shouldfail": False, "testsfailed": 0, "exitstatus": 0}
    return SimpleNamespace(**defaults | overrides)


def test_grants_are_checked_for_use_only_after_the_whole_suite():
    """`make test` (no paths, `-m "not reliability"`) is a whole run; named paths, `-k`,
    `--deselect`, another `-m`, an early stop or a failed test are not."""
    assert whole_run_problem(_config(), _session()) is None
    assert whole_run_problem(_config(markexpr=""), _session()) is None
    partial = [
        (_config(args_source=pytest.Config.ArgsSource.ARGS), _session()),
        (_config(keyword="iam"), _session()),
        (_config(deselect=["tests/x.py::t"]), _session()),
        (_config(markexpr="browser"), _session()),
        (_config(), _session(shouldfail="stopping after 1 failures")),
        (_config(), _session(testsfailed=2)),
    ]
    for config, session in partial:
        assert whole_run_problem(config, session) is not None


@dataclass
class _Terminal:
    lines: list[str] = field(default_factory=list)

    def section(self, title: str, **kwargs: Any) -> None:
        self.lines.append(f"== {title}")

    def write_line(self, line: str) -> None:
        self.lines.append(line)


def test_a_finding_fails_the_run_and_is_listed_in_the_summary():
    """At the end of a run the plugin sets exit status 1 and lists the finding; a clean
    run keeps its status and says what was checked."""
    recorder = Recorder()
    recorder.seen = {r.key: r for r in _every_grant_used()}
    plugin = IamRecorderPlugin(_config(), recorder)
    session = _session()
    plugin.pytest_sessionfinish(session)
    terminal = _Terminal()
    plugin.pytest_terminal_summary(terminal)
    assert session.exitstatus == 0
    assert terminal.lines == [
        f"IAM policy: {len(recorder.seen)} distinct calls recorded; grants checked for use"
    ]

    extra = Recorded("Scan", "requests", None, "reconciliation/claims/x.py:3 f")
    recorder.seen[extra.key] = extra
    plugin = IamRecorderPlugin(_config(), recorder)
    session = _session()
    plugin.pytest_sessionfinish(session)
    terminal = _Terminal()
    plugin.pytest_terminal_summary(terminal)
    assert session.exitstatus == pytest.ExitCode.TESTS_FAILED
    assert terminal.lines[0] == "== IAM policy (manage.py iam_policy)"
    assert (
        "outside the policy: dynamodb:Scan on requests (reconciliation/claims/x.py:3 f)"
        in terminal.lines
    )


def test_clients_built_by_a_module_that_imported_the_builder_early_are_recorded():
    """The drill's own clients come from reconciliation.simulation.fault_hooks, which
    bound ``build_client`` when it was imported, before the recorder wrapped it: the
    wrapper reaches that name too, so the drill's calls are checked against the policy."""
    from reconciliation.dynamo import client as client_module
    from reconciliation.simulation import fault_hooks

    assert client_module.build_client.__name__ == "recording_build_client"
    assert fault_hooks.build_client is client_module.build_client

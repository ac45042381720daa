"""Exports: 10 000 events round-trip through CSV and JSON Lines with a signed manifest,
spreadsheet formulas are neutralised, every export is an audit event, and
``verify_export`` checks a file offline and names each mismatch."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from datetime import UTC, datetime, time, timedelta
from pathlib import Path

import pytest
from django.core.management import call_command

from reconciliation import clock
from reconciliation.actors import Actor, Role
from reconciliation.audit.export.background import (
    ExportForbidden,
    export_download,
    export_request,
    export_run_requested,
    export_status,
)
from reconciliation.audit.export.delivery import export_stream_http, export_to_file
from reconciliation.audit.export.rows import CSV_COLUMNS
from reconciliation.audit.export.run import ExportAsk
from reconciliation.audit.filters import AuditFilters, FilterAsk
from reconciliation.audit.models import AuditEvent
from reconciliation.audit.repository import GENESIS_HASH, audit_event_build
from reconciliation.dynamo.client import dynamodb_client, reset_clients
from tests.helpers import AS_SYSTEM, audit_events, audit_seed, repositories, sign_in, staff_user

AUDITOR = Actor("aud", Role.AUDITOR, "aud@example.org", "10.0.0.30")
OTHER_AUDITOR = Actor("aud2", Role.AUDITOR, "aud2@example.org", "10.0.0.31")
FORMULAS = ['=HYPERLINK("http://x")', "+1+1", "-2", "@SUM(A1)", "\tTAB", "\rCR", "plain"]

pytestmark = pytest.mark.usefixtures("midday")


def day_start(days_ago: int) -> datetime:
    return datetime.combine(clock.now().date() - timedelta(days=days_ago), time.min, tzinfo=UTC)


def formula_events() -> list[dict]:
    """One CASE stream whose reason texts start with every formula trigger."""
    events, prev = [], GENESIS_HASH
    for seq, text in enumerate(FORMULAS, 1):
        event = audit_event_build(
            AuditEvent(
                action="disposition_recorded",
                actor=Actor("=cmd|' /C calc'!A0", Role.FINANCE_STAFF, "-x@example.org"),
                at=day_start(1) + timedelta(hours=1, seconds=seq),
                case_id="C-FORMULA",
                reason_text=text,
            ),
            stream="CASE#C-FORMULA",
            seq=seq,
            prev_hash=prev,
        )
        prev = event["hash"]
        events.append(event)
    repositories().audit.batch_put(events)
    return events


def whole_range() -> dict:
    """The seeded days; today (where export events land) is left out."""
    today = clock.now().date()
    return {
        "since": (today - timedelta(days=3)).isoformat(),
        "until": (today - timedelta(days=1)).isoformat(),
    }


def expected_heads(events: list[dict]) -> list[list]:
    heads: dict[str, tuple[int, str]] = {}
    for e in events:
        if e["seq"] > heads.get(e["stream"], (0, ""))[0]:
            heads[e["stream"]] = (e["seq"], e["hash"])
    return [[s, q, h] for s, (q, h) in sorted(heads.items())]


def verify_export(file_path: Path, manifest_path: Path) -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("verify_export", str(file_path), str(manifest_path), stdout=out)
    except SystemExit as exc:
        return int(exc.code), out.getvalue()
    return 0, out.getvalue()


# Generous but bounded: on two loaded cores shared with other work, loading and twice
# exporting 10 000 events has taken over 300 s.
@pytest.mark.long
@pytest.mark.timeout(900)
@pytest.mark.dynamodb_local_only
@pytest.mark.django_db
def test_ten_thousand_events_round_trip_through_csv_and_jsonl(  # noqa: PLR0915
    ddb, client, tmp_path, settings
):
    """10 000 events stream out over HTTP as CSV and as JSON Lines in bounded chunks,
    fetched page by page; both parse back to the stored rows, their SHA-256 equals the
    signed manifest's, ``verify_export`` accepts them and each export is an event."""
    settings.AUDIT_EXPORT_DIR = tmp_path / "exports"
    # The request path's patience (2 s reads, 2 attempts) is made for a quiet engine;
    # this test is about the export's content, not about a starved JVM answering late.
    settings.DDB_READ_TIMEOUT_S, settings.DDB_MAX_ATTEMPTS = 30, 5
    reset_clients()
    events = audit_seed(10_000 - len(FORMULAS), tag="rt") + formula_events()
    stored = sorted(audit_events(ddb), key=lambda e: e["at_id"])
    assert len(stored) == 10_000
    sign_in(client, "auditor", "aud")
    queries: list[int] = []
    # Counted on the client the export uses (the patient one built above).
    dynamodb_client().meta.events.register(
        "before-call.dynamodb.Query", lambda **kw: queries.append(1)
    )

    for fmt in ("csv", "jsonl"):
        queries.clear()
        response = client.get(f"/audit/export.{fmt}", whole_range())
        assert response.status_code == 200 and response.streaming
        export_id = response["X-Audit-Export-Id"]
        chunks = iter(response.streaming_content)
        first = next(chunks)
        # Lazily fetched: the first chunk needs the first page of each shard (plus one
        # prefetched page each), not the whole range.
        assert len(queries) <= 2 * 8 * 2
        body_parts = [first, *chunks]
        assert len(body_parts) > 10 and max(map(len, body_parts)) < 200_000
        body = b"".join(body_parts)

        if fmt == "csv":
            rows = list(csv.reader(io.StringIO(body.decode("utf-8"), newline="")))
            assert tuple(rows[0]) == CSV_COLUMNS
            parsed = [dict(zip(CSV_COLUMNS, r, strict=True)) for r in rows[1:]]
            assert [(r["stream"], int(r["seq"]), r["hash"]) for r in parsed] == [
                (e["stream"], e["seq"], e["hash"]) for e in stored
            ]
            assert [r["at"] for r in parsed] == [e["at"] for e in stored]
            assert [r["reason_text"] for r in parsed] == [
                ("'" + t if t and t[0] in "=+-@\t\r" else t)
                for t in (e.get("reason_text", "") for e in stored)
            ]
            formula_rows = [r for r in parsed if r["stream"] == "CASE#C-FORMULA"]
            assert {r["actor_username"] for r in formula_rows} == {"'=cmd|' /C calc'!A0"}
            assert {r["actor_email"] for r in formula_rows} == {"'-x@example.org"}
        else:
            lines = body.decode("utf-8").splitlines()
            assert [json.loads(line) for line in lines] == stored

        manifest_response = client.get(f"/audit/exports/{export_id}/manifest.json")
        assert manifest_response.status_code == 200
        manifest_bytes = b"".join(manifest_response.streaming_content)
        manifest = json.loads(manifest_bytes)
        assert manifest["sha256"] == hashlib.sha256(body).hexdigest()
        assert manifest["row_count"] == 10_000 and manifest["bytes"] == len(body)
        assert manifest["first_event"]["event_id"] == stored[0]["event_id"]
        assert manifest["last_event"]["hash"] == stored[-1]["hash"]
        assert manifest["chain_heads"] == expected_heads(stored)
        assert manifest["generated_by"] == {
            "username": "aud",
            "email": "aud@example.org",
            "role": "auditor",
        }

        (tmp_path / f"x.{fmt}").write_bytes(body)
        (tmp_path / f"x.{fmt}.manifest.json").write_bytes(manifest_bytes)
        code, out = verify_export(tmp_path / f"x.{fmt}", tmp_path / f"x.{fmt}.manifest.json")
        assert code == 0, out

        trail = audit_events(ddb, f"EXPORT#{export_id}")
        assert [e["action"] for e in trail] == ["export_completed", "export_downloaded"]
        done = trail[0]
        assert done["actor"]["username"] == "aud"
        assert done["detail"]["row_count"] == 10_000
        assert done["detail"]["sha256"] == manifest["sha256"]
        assert done["detail"]["filters"]["since"].startswith(whole_range()["since"])
    assert len(events) == 10_000


@pytest.mark.django_db(databases=[])
def test_formula_cells_are_neutralised_in_csv_only(ddb, tmp_path):
    """Cells starting with =, +, -, @, tab or CR get a leading apostrophe in CSV; JSON
    Lines keeps the stored values (they are data, and hashed as stored)."""
    formula_events()
    filters = AuditFilters.build(FilterAsk(**whole_range()))
    for fmt in ("csv", "jsonl"):
        out = tmp_path / f"f.{fmt}"
        export_to_file(ExportAsk(filters, fmt, AUDITOR, AS_SYSTEM.store), out_path=out)
        with out.open(encoding="utf-8", newline="") as fh:
            text = fh.read()
        if fmt == "csv":
            rows = list(csv.DictReader(io.StringIO(text, newline="")))
            assert [r["reason_text"] for r in rows] == [
                '\'=HYPERLINK("http://x")',
                "'+1+1",
                "'-2",
                "'@SUM(A1)",
                "'\tTAB",
                "'\rCR",
                "plain",
            ]
            assert all(r["actor_username"].startswith("'=") for r in rows)
        else:
            texts = [json.loads(line)["reason_text"] for line in text.splitlines()]
            assert texts == FORMULAS


@pytest.mark.django_db
def test_export_audit_command_writes_file_manifest_and_event(ddb, tmp_path):
    """``export_audit`` writes the file, ``FILE.manifest.json`` beside it and an
    ``EXPORT#`` event; ``verify_export`` accepts the pair."""
    events = audit_seed(150)
    out = tmp_path / "trail.jsonl"
    stdout = io.StringIO()
    call_command(
        "export_audit",
        "--since",
        whole_range()["since"],
        "--until",
        whole_range()["until"],
        "--format",
        "jsonl",
        "--out",
        str(out),
        stdout=stdout,
    )
    manifest = json.loads(Path(f"{out}.manifest.json").read_text())
    assert manifest["row_count"] == len(events) == len(out.read_text().splitlines())
    assert f"{len(events)} events -> {out}" in stdout.getvalue()
    code, text = verify_export(out, Path(f"{out}.manifest.json"))
    assert code == 0, text
    [event] = audit_events(ddb, f"EXPORT#{manifest['export_id']}")
    assert event["action"] == "export_completed"
    assert event["actor"]["username"].startswith("cli:") and event["actor"]["role"] == "system"
    assert event["detail"]["sha256"] == manifest["sha256"]


@pytest.mark.django_db
def test_export_audit_as_finance_staff_exports_only_own_events(ddb, tmp_path):
    """``--user`` applies that user's role: finance staff get their own events only."""
    events = audit_seed(200)
    staff_user("ada", "finance_staff", password="pw-ada-123456")
    out = tmp_path / "ada.csv"
    call_command(
        "export_audit",
        "--since",
        whole_range()["since"],
        "--format",
        "csv",
        "--out",
        str(out),
        "--user",
        "ada",
        stdout=io.StringIO(),
    )
    rows = list(csv.DictReader(out.open(encoding="utf-8", newline="")))
    expected = [e for e in events if e["actor"]["username"] == "ada"]
    assert expected and len(rows) == len(expected)
    assert {r["actor_username"] for r in rows} == {"ada"}


@pytest.mark.django_db(databases=[])
def test_verify_export_names_each_mismatch_offline(ddb, tmp_path, settings, monkeypatch):
    """Without DynamoDB, ``verify_export`` accepts the untouched pair and names a changed
    byte, a dropped row, an edited manifest and a different key, exiting non-zero."""
    audit_seed(60)
    out = tmp_path / "t.csv"
    export_to_file(
        ExportAsk(AuditFilters.build(FilterAsk(**whole_range())), "csv", AUDITOR, AS_SYSTEM.store),
        out_path=out,
    )
    manifest_path = Path(f"{out}.manifest.json")

    def boom(*args, **kwargs):
        raise AssertionError("verify_export must not touch DynamoDB")

    for name in ("first_store", "home_store", "every_store", "shared_client"):
        monkeypatch.setattr(f"reconciliation.stores.{name}", boom)
    assert verify_export(out, manifest_path)[0] == 0
    original = out.read_bytes()
    manifest = json.loads(manifest_path.read_text())

    out.write_bytes(original.replace(b"EVIDENCE_REVIEWED", b"EVIDENCE_REVIEWEX", 1))
    code, text = verify_export(out, manifest_path)
    assert code == 1 and text.splitlines()[0].startswith(
        f"sha256 mismatch: manifest {manifest['sha256']}, file "
    )

    out.write_bytes(original[: original.rstrip(b"\r\n").rindex(b"\r\n") + 2])
    code, text = verify_export(out, manifest_path)
    assert code == 1
    assert "row count mismatch: manifest 60, file 59" in text
    assert "last event mismatch" in text

    out.write_bytes(original)
    forged = {**manifest, "row_count": 59}
    manifest_path.write_text(json.dumps(forged))
    code, text = verify_export(out, manifest_path)
    assert code == 1 and text.splitlines()[0].startswith("signature mismatch")

    manifest_path.write_text(json.dumps(manifest))
    settings.AUDIT_SIGNING_KEY = "another-key"
    code, text = verify_export(out, manifest_path)
    assert code == 1 and text.splitlines()[0].startswith("signature key mismatch")


@pytest.mark.django_db(databases=[])
def test_client_disconnect_records_an_abandoned_export(ddb, settings, tmp_path):
    """Closing a streamed export part-way records ``export_abandoned`` with what was
    sent; no manifest claims a complete file."""
    settings.AUDIT_EXPORT_DIR = tmp_path
    audit_seed(500)  # a few 64 KB chunks
    run, body = export_stream_http(
        ExportAsk(AuditFilters.build(FilterAsk(**whole_range())), "jsonl", AUDITOR, AS_SYSTEM.store)
    )
    first = next(body)
    body.close()
    [event] = audit_events(ddb, f"EXPORT#{run.export_id}")
    assert event["action"] == "export_abandoned"
    assert event["detail"]["bytes_sent"] == len(first) and event["detail"]["rows_sent"] > 0
    assert not list(tmp_path.glob("*.manifest.json"))


@pytest.mark.django_db(databases=[])
def test_background_export_runs_once_and_only_its_owner_downloads(ddb, settings, tmp_path):
    """A requested export runs into AUDIT_EXPORT_DIR once (a redelivery is a no-op);
    its owner's download is recorded, anyone else is refused."""
    settings.AUDIT_EXPORT_DIR = tmp_path
    events = audit_seed(120)
    filters = AuditFilters.build(FilterAsk(**whole_range()))
    export_id = export_request(filters=filters, fmt="csv", actor=AUDITOR, store=AS_SYSTEM.store)
    assert export_status(export_id, store=AS_SYSTEM.store).state == "requested"
    seen: list[tuple[int, float]] = []
    core = export_run_requested(
        export_id, progress=lambda r, f: seen.append((r, f)), store=AS_SYSTEM.store
    )
    assert core["row_count"] == len(events) and seen[-1] == (len(events), 1.0)
    assert export_run_requested(export_id, store=AS_SYSTEM.store) is None
    with pytest.raises(ExportForbidden):
        export_download(export_id, actor=OTHER_AUDITOR, store=AS_SYSTEM.store)
    path, name = export_download(export_id, actor=AUDITOR, store=AS_SYSTEM.store)
    assert path.read_bytes().startswith(b"at,stream,seq") and name == f"audit-{export_id}.csv"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == core["sha256"]
    actions = [e["action"] for e in audit_events(ddb, f"EXPORT#{export_id}")]
    assert actions == ["export_requested", "export_completed", "export_downloaded"]
    status = export_status(export_id, store=AS_SYSTEM.store)
    assert status.done and status.downloads == 1 and status.row_count == len(events)


@pytest.mark.django_db(databases=[])
def test_empty_range_exports_a_header_and_a_valid_manifest(ddb, tmp_path):
    """No events: the CSV holds its header only and still verifies against its manifest."""
    out = tmp_path / "empty.csv"
    core = export_to_file(
        ExportAsk(
            AuditFilters.build(FilterAsk(since="2020-01-01", until="2020-01-02")),
            "csv",
            AUDITOR,
            AS_SYSTEM.store,
        ),
        out_path=out,
    )
    assert core["row_count"] == 0 and core["first_event"] is None
    assert out.read_text().splitlines() == [",".join(CSV_COLUMNS)]
    assert verify_export(out, Path(f"{out}.manifest.json"))[0] == 0

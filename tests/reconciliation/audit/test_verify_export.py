"""``verify_export`` on files that are not what an export looks like: it says what is
wrong (a ``CommandError``, non-zero exit), never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from reconciliation.audit.export.run import MANIFEST_SIGNED

ROOT = Path(__file__).resolve().parents[3]


def _manifest(fmt: str) -> dict:
    """A manifest with every field present (its signature is wrong, which is reported)."""
    fields = dict.fromkeys(MANIFEST_SIGNED, "")
    fields.update(format=fmt, row_count=0, bytes=0, chain_heads=[], chain_heads_count=0)
    return {**fields, "signature": "x", "key_id": "k"}


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_export_file_that_is_not_utf8_is_a_command_error(tmp_path, fmt):
    """A data file with bytes that are not UTF-8: a CommandError naming the file and the
    byte offset, not a UnicodeDecodeError traceback."""
    data = tmp_path / f"x.{fmt}"
    data.write_bytes(b"stream,seq\r\n\xff\xfe\x00broken\r\n")
    manifest = tmp_path / "x.manifest.json"
    manifest.write_text(json.dumps(_manifest(fmt)))
    with pytest.raises(CommandError, match=r"x\.(csv|jsonl).*not UTF-8.*byte 12"):
        call_command("verify_export", str(data), str(manifest))


@pytest.mark.parametrize(
    ("content", "what"),
    [
        (b"[1, 2, 3]", "a list"),
        (b"42", "a number"),
        (b'"sha256 signature key_id"', "a string"),
        (b"null", "null"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b"{not json", "not JSON"),
    ],
)
def test_manifest_that_is_not_a_json_object_is_a_command_error(tmp_path, content, what):
    """A manifest that is not a JSON object (or not JSON, or not UTF-8): a CommandError
    saying so, not a TypeError traceback."""
    data = tmp_path / "x.csv"
    data.write_bytes(b"")
    manifest = tmp_path / "x.manifest.json"
    manifest.write_bytes(content)
    with pytest.raises(CommandError, match=rf"manifest.*{what}"):
        call_command("verify_export", str(data), str(manifest))


def test_jsonl_line_that_is_not_an_object_is_named(tmp_path):
    """A JSON Lines row that is valid JSON but not an object is one named problem."""
    data = tmp_path / "x.jsonl"
    data.write_bytes(b"[1]\n")
    manifest = tmp_path / "x.manifest.json"
    manifest.write_text(json.dumps(_manifest("jsonl")))
    out = StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("verify_export", str(data), str(manifest), stdout=out)
    assert exited.value.code == 1
    assert "line 1: not a JSON object" in out.getvalue()


def test_command_line_exit_is_non_zero_with_a_message(tmp_path):
    """From the shell: exit status 1 and one ``CommandError:`` line, no traceback."""
    data = tmp_path / "x.csv"
    data.write_bytes(b"\xff")
    manifest = tmp_path / "x.manifest.json"
    manifest.write_text(json.dumps(_manifest("csv")))
    result = subprocess.run(
        [sys.executable, "manage.py", "verify_export", str(data), str(manifest)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "CommandError: " in result.stderr and "not UTF-8" in result.stderr

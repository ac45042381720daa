"""The embedded engine: without Java, the fallback is moto's server, said out loud."""

from __future__ import annotations

import urllib.request

from reconciliation.dynamo import local


def test_missing_java_falls_back_to_moto_with_a_loud_warning(monkeypatch, capsys):
    """No java on PATH: one clear line naming the problem and the fix, and moto's server
    answering instead, flagged as not honouring ClientRequestToken."""
    real_which = local.shutil.which
    monkeypatch.setattr(
        local.shutil, "which", lambda name: None if name == "java" else real_which(name)
    )
    engine = local.start_best_engine()
    try:
        warning = capsys.readouterr().err
        assert engine.kind == "moto" and not engine.honours_client_request_token
        assert "java not found" in warning and "apt-get install" in warning
        assert "does NOT honour ClientRequestToken" in warning
        with urllib.request.urlopen(engine.endpoint_url + "/moto-api/", timeout=5) as resp:
            assert resp.status == 200
    finally:
        engine.stop()
    assert engine.process.poll() is not None

"""The development sink's rules, without a process: a bad signature is refused and not
processed; a repeated ``webhook-id`` is a duplicate, processed once; during a rotation
either secret is accepted, given twice or in a file read again when it changes."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from reconciliation import clock
from reconciliation.acks.models import secret_new
from reconciliation.acks.send import signed_headers
from reconciliation.simulation.webhook_sink import FaultRates, Misbehaviour, SinkSecrets, SinkState


def test_the_sink_verifies_and_deduplicates():
    """Signed by another secret: 400, nothing processed. Twice the same id: one processed,
    one duplicate, both answered 200."""
    secret = secret_new()
    sink = SinkState(secret=secret)
    body = b'{"type":"pledge.recorded"}'
    forged = signed_headers(secret=secret_new(), event_id="msg_1", at=clock.now(), body=body)
    assert sink.receive(body, forged) == (400, Misbehaviour.NONE)
    good = signed_headers(secret=secret, event_id="msg_1", at=clock.now(), body=body)
    assert sink.receive(body, good) == (200, Misbehaviour.NONE)
    assert sink.receive(body, good) == (200, Misbehaviour.NONE)
    stats = sink.stats()
    assert (stats["rejected"], stats["deliveries"], stats["duplicates"]) == (1, 2, 1)
    assert stats["processed"] == ["msg_1"]


def test_misbehaviour_applies_to_the_first_deliveries_only():
    """``--misbehave-count 1``: the first delivery is told to misbehave, the next is not."""
    secret = secret_new()
    sink = SinkState(secret=secret, misbehave=Misbehaviour.ERROR_500, misbehave_count=1)
    body = b"{}"
    first = signed_headers(secret=secret, event_id="msg_a", at=clock.now(), body=body)
    second = signed_headers(secret=secret, event_id="msg_b", at=clock.now(), body=body)
    assert sink.receive(body, first)[1] == Misbehaviour.ERROR_500
    assert sink.receive(body, second)[1] == Misbehaviour.NONE


def test_random_faults_follow_their_rates_and_replay_with_the_seed():
    """Rates 20 % / 5 % / 5 % over 2 000 distinct deliveries: each share within a few
    points of its rate; a timeout before processing leaves the event unprocessed, every
    other delivery is processed; the same seed draws the same sequence."""

    def run(seed: int) -> tuple[list[Misbehaviour], dict]:
        secret = secret_new()
        rates = FaultRates(fail=0.2, timeout_after=0.05, timeout_before=0.05)
        sink = SinkState(secret=secret, rates=rates, rng=random.Random(seed))
        drawn = []
        for n in range(2000):
            headers = signed_headers(secret=secret, event_id=f"msg_{n}", at=clock.now(), body=b"{}")
            drawn.append(sink.receive(b"{}", headers)[1])
        return drawn, sink.stats()

    drawn, stats = run(26)
    shares = {m: drawn.count(m) / len(drawn) for m in Misbehaviour}
    assert abs(shares[Misbehaviour.ERROR_500] - 0.2) < 0.03
    assert abs(shares[Misbehaviour.TIMEOUT] - 0.05) < 0.02
    assert abs(shares[Misbehaviour.TIMEOUT_BEFORE] - 0.05) < 0.02
    assert shares[Misbehaviour.SLOW] == 0
    lost_before = {f"msg_{n}" for n, m in enumerate(drawn) if m == Misbehaviour.TIMEOUT_BEFORE}
    assert set(stats["processed"]) == {f"msg_{n}" for n in range(2000)} - lost_before
    assert stats["misbehaved"] == {
        "500": drawn.count(Misbehaviour.ERROR_500),
        "timeout": drawn.count(Misbehaviour.TIMEOUT),
        "timeout-before": drawn.count(Misbehaviour.TIMEOUT_BEFORE),
    }
    assert set(stats["received_at"]) == set(stats["processed"])
    assert run(26)[0] == drawn and run(27)[0] != drawn


def test_rates_over_one_are_refused():
    """Rates that cannot be probabilities of one draw are refused."""
    with pytest.raises(ValueError):
        FaultRates(fail=0.7, timeout_after=0.4)
    with pytest.raises(ValueError):
        FaultRates(fail=-0.1)


def test_an_open_request_is_in_flight_until_answered():
    """A request the sink holds shows in ``in_flight`` (a sender mid-send) until answered."""
    sink = SinkState(secret=secret_new())
    ticket = sink.arrived("msg_x")
    [open_request] = sink.stats()["in_flight"]
    assert open_request["id"] == "msg_x" and open_request["age_s"] >= 0
    sink.answered(ticket)
    assert sink.stats()["in_flight"] == []


def test_the_command_refuses_rates_over_one_before_listening():
    """``webhook_sink --fail-rate 0.9 --timeout-after-processing-rate 0.2``: refused, in words."""
    with pytest.raises(CommandError, match="at most 1"):
        call_command(
            "webhook_sink",
            "--port",
            "1",
            "--secret",
            secret_new(),
            "--fail-rate",
            "0.9",
            "--timeout-after-processing-rate",
            "0.2",
        )


def test_a_delivery_signed_with_both_secrets_verifies_with_either():
    """During a rotation the dispatcher signs ``v1,<new> v1,<old>``: a receiver that knows
    the old secret only, the new one only, or both accepts it; one that knows neither
    refuses it."""
    old, new = secret_new(), secret_new()
    body = b'{"type":"pledge.recorded"}'
    both = signed_headers(
        secret=new, previous_secret=old, event_id="msg_r", at=clock.now(), body=body
    )
    assert len(both["webhook-signature"].split(" ")) == 2
    for given in ((old,), (new,), (old, new)):
        sink = SinkState(secrets=SinkSecrets(given=given))
        assert sink.receive(body, both) == (200, Misbehaviour.NONE)
    stranger = SinkState(secrets=SinkSecrets(given=(secret_new(),)))
    assert stranger.receive(body, both) == (400, Misbehaviour.NONE)


def test_a_sink_given_two_secrets_accepts_deliveries_signed_by_either():
    """``--secret OLD --secret NEW``: each one's signature alone is accepted."""
    old, new = secret_new(), secret_new()
    sink = SinkState(secrets=SinkSecrets(given=(old, new)))
    body = b"{}"
    for n, secret in enumerate((old, new)):
        headers = signed_headers(secret=secret, event_id=f"msg_{n}", at=clock.now(), body=body)
        assert sink.receive(body, headers) == (200, Misbehaviour.NONE)
    assert sink.stats()["processed"] == ["msg_0", "msg_1"]


def write_replacing(path: Path, text: str, mtime_ns: int) -> None:
    """Write ``text`` beside ``path`` and rename it over (as an editor or a deploy does),
    with a given modification time."""
    spare = path.with_suffix(".new")
    spare.write_text(text)
    os.utime(spare, ns=(mtime_ns, mtime_ns))
    spare.replace(path)


def test_the_secret_file_is_read_again_when_it_changes(tmp_path):
    """``--secret-file``: the old secret alone, then old and new (one a line), then the
    new one alone; each delivery is judged by the file as it is at that moment, with no
    restart. A file missing for a moment leaves the secrets last read."""
    old, new = secret_new(), secret_new()
    file = tmp_path / "secrets"
    write_replacing(file, old + "\n", 1_000_000_000)
    sink = SinkState(secrets=SinkSecrets(file=file))
    body = b"{}"

    def answer(secret: str, event: str) -> int:
        headers = signed_headers(secret=secret, event_id=event, at=clock.now(), body=body)
        return sink.receive(body, headers)[0]

    assert (answer(old, "msg_1"), answer(new, "msg_2")) == (200, 400)
    write_replacing(file, f"{old}\n{new}\n", 2_000_000_000)
    assert (answer(old, "msg_3"), answer(new, "msg_4")) == (200, 200)
    write_replacing(file, f"\n{new}\n", 3_000_000_000)
    assert (answer(old, "msg_5"), answer(new, "msg_6")) == (400, 200)
    file.unlink()
    assert (answer(old, "msg_7"), answer(new, "msg_8")) == (400, 200)


@pytest.mark.parametrize(
    ("args", "why"),
    [
        ((), "--secret"),
        (("--secret-file", "/nonexistent/secrets"), "no such file"),
        (("--secret", "whsec_"), "not a whsec_"),
    ],
)
def test_the_sink_command_refuses_to_start_without_a_usable_secret(args, why):
    """No secret, a missing file or an empty secret: refused before listening."""
    with pytest.raises(CommandError, match=why):
        call_command("webhook_sink", "--port", "0", *args)

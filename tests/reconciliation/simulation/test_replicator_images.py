"""The Global Tables stand-in copes with how DynamoDB Local spells stream images.

It knows its own writes whatever spelling of a number the engine gives back: DynamoDB
Local keeps ``110.90`` from an ``ADD`` but stores and streams ``110.9`` when the same
image is put. Before, the stand-in's own write of a ledger shard
came back as a write of the other region, stamped later than the home region's newer
additions, and won: the home region's shard went back to the older total (seen in
tests/reliability/test_regions_load.py: a ledger below its RECORDED pledges, pinned)."""

from __future__ import annotations

from reconciliation.simulation.replicator_lww import Change, Lag, Resolver, digest
from reconciliation.simulation.replicator_streams import repaired

KEY = {"fund": {"S": "BUILDING#USD#0"}}


def shard(total: str, count: str) -> dict:
    return {**KEY, "pledged_total": {"N": total}, "pledge_count": {"N": count}}


def change(old: dict | None, new: dict | None, seen: float) -> Change:
    return Change("ledger", KEY, old, new, created=0.0, seen=seen)


def test_a_number_has_one_digest_however_it_is_spelled():
    assert digest(shard("110.90", "2")) == digest(shard("110.9", "2"))
    assert digest(shard("100", "2")) == digest(shard("1E+2", "2"))
    assert digest({**KEY, "s": {"NS": ["1.50", "2"]}}) == digest({**KEY, "s": {"NS": ["2", "1.5"]}})
    assert digest(shard("110.91", "2")) != digest(shard("110.9", "2"))


def test_its_own_write_with_a_respelled_number_is_an_echo_and_the_home_keeps_its_newer_total():
    resolver = Resolver(2, Lag.parse("0"))
    v1, v2 = shard("110.90", "2"), shard("225.95", "3")
    # Region 0 (the home) adds twice; the first total is owed to region 1.
    [owed] = resolver.observe(0, change(shard("67.57", "1"), v1, seen=1.0))
    assert resolver.due(2.0) == [owed]
    resolver.applied(owed, None)  # region 1 had no copy yet
    resolver.observe(0, change(v1, v2, seen=3.0))
    # Region 1's stream gives the stand-in's own write back, number respelled, after
    # the home's newer addition was read.
    back = resolver.observe(1, change(None, shard("110.9", "2"), seen=4.0))
    assert resolver.echoes_dropped == 1
    # Region 1 is owed the newer total; nothing is owed to the home region.
    assert [(a.destination, a.version.image) for a in back] == [(1, v2)]
    assert [version.image for version in resolver.winners.values()] == [v2]


def test_an_empty_map_in_a_stream_image_is_copied_as_an_empty_map():
    """DynamoDB Local's stream images spell an empty map ``{}``, which PutItem refuses
    (``ValidationException``): the ledger drift case's opening event (facts with an empty
    map) was retried for ever and the regions never converged."""
    streamed = {
        "stream": {"S": "CASE#C-X"},
        "detail": {"M": {"accepted": {}, "intents": {"L": [{}, {"S": "a"}]}}},
        "empty": {},
    }
    assert repaired(streamed) == {
        "stream": {"S": "CASE#C-X"},
        "detail": {"M": {"accepted": {"M": {}}, "intents": {"L": [{"M": {}}, {"S": "a"}]}}},
        "empty": {"M": {}},
    }
    assert repaired(None) is None

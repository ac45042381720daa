"""The region map: a key's home region and each region's tag derive from
region names, never from the order of ``DDB_REGIONS``; the untagged region is a named
primary region (``DDB_PRIMARY_REGION``, default the smallest name)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from reconciliation.dynamo.client import home_region, local_region, regions

KEYS = [f"acme#create_pledge#map-{n}" for n in range(300)]


def _map(listing: str, **extra) -> tuple[list[str], dict[str, str]]:
    with override_settings(DDB_REGIONS=listing, **extra):
        return [home_region(k).name for k in KEYS], {r.name: r.tag for r in regions()}


def test_home_and_tag_derive_from_region_names_not_list_order():
    """The same three regions in three orders: every key has one home, every region one
    tag; the untagged one is the smallest name unless DDB_PRIMARY_REGION names another."""
    listings = (
        "us-east-1=http://a:1,eu-west-1=http://b:2,ap-south-1=http://c:3",
        "eu-west-1=http://b:2,ap-south-1=http://c:3,us-east-1=http://a:1",
        "ap-south-1=http://c:3,us-east-1=http://a:1,eu-west-1=http://b:2",
    )
    maps = [_map(listing) for listing in listings]
    assert all(m == maps[0] for m in maps)
    homes, tags = maps[0]
    assert tags == {"ap-south-1": "", "eu-west-1": "eu-west-1", "us-east-1": "us-east-1"}
    assert {h: homes.count(h) > 60 for h in tags} == dict.fromkeys(tags, True)
    named = [_map(listing, DDB_PRIMARY_REGION="us-east-1") for listing in listings]
    assert all(m == named[0] for m in named)
    assert named[0][0] == homes  # the primary region names keys; it does not move them
    assert named[0][1] == {"ap-south-1": "ap-south-1", "eu-west-1": "eu-west-1", "us-east-1": ""}


def test_adding_a_region_moves_only_the_keys_the_new_region_takes():
    """Rendezvous hashing: with a third region, a key either keeps its home or moves to the
    new region; never from one old region to the other."""
    before, _ = _map("us-east-1=http://a:1,eu-west-1=http://b:2")
    after, _ = _map("us-east-1=http://a:1,eu-west-1=http://b:2,ap-south-1=http://c:3")
    moved = [(b, a) for b, a in zip(before, after, strict=True) if a != b]
    assert moved and all(a == "ap-south-1" for _, a in moved)
    assert 60 < len(moved) < 150  # about a third


def test_a_single_region_keeps_its_untagged_keys():
    with override_settings(DDB_REGIONS="eu-west-1=http://b:2", DDB_PRIMARY_REGION=""):
        [only] = regions()
        assert only.tag == "" and home_region(KEYS[0]) == only
    with override_settings(DDB_REGIONS="", AWS_REGION="eu-west-1"):
        [only] = regions()
        assert (only.name, only.tag) == ("eu-west-1", "")


def test_the_primary_region_must_be_listed():
    with (
        override_settings(DDB_REGIONS="us-east-1=http://a:1", DDB_PRIMARY_REGION="eu-west-1"),
        pytest.raises(ImproperlyConfigured, match="DDB_PRIMARY_REGION"),
    ):
        regions()


def test_the_local_region_is_aws_region_if_listed_else_the_primary():
    listing = "us-east-1=http://a:1,eu-west-1=http://b:2"
    with override_settings(DDB_REGIONS=listing, AWS_REGION="us-east-1"):
        assert local_region().name == "us-east-1"
    with override_settings(DDB_REGIONS=listing, AWS_REGION="ap-south-1"):
        assert local_region().name == "eu-west-1"

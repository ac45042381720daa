"""Which URLs may receive acknowledgements: https, public addresses only; loopback over
http only in debug or demo. The resolver is stubbed: nothing here connects anywhere."""

from __future__ import annotations

import ipaddress

import pytest

from reconciliation.acks.addresses import UrlRefused, url_check


def resolver(*answers: str):
    calls: list[tuple[str, int]] = []

    def resolve(host: str, port: int) -> list[str]:
        calls.append((host, port))
        return list(answers)

    resolve.calls = calls  # type: ignore[attr-defined]
    return resolve


def test_a_public_https_url_is_accepted_with_the_address_it_resolved_to():
    """An https URL whose host resolves to a public address is accepted, with its target."""
    target = url_check(
        "https://crm.example.org/hooks?x=1", allow_loopback=False, resolve=resolver("93.184.216.34")
    )
    assert (target.scheme, target.host, target.port, target.path, target.address) == (
        "https",
        "crm.example.org",
        443,
        "/hooks?x=1",
        "93.184.216.34",
    )


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("10.0.0.7", "a private address"),
        ("192.168.1.20", "a private address"),
        ("172.16.0.1", "a private address"),
        ("169.254.10.1", "a link-local address"),
        ("169.254.169.254", "a cloud metadata address"),
        ("fd00:ec2::254", "a cloud metadata address"),
        ("fe80::1", "a link-local address"),
        ("127.0.0.1", "a loopback address"),
        ("0.0.0.0", "not a unicast public address"),
    ],
)
def test_a_host_resolving_to_an_internal_address_is_refused(address, why):
    """A name that resolves into the network (private, link-local, metadata, loopback
    outside debug) is refused, saying which address and why; it is never connected to."""
    with pytest.raises(UrlRefused, match=why):
        url_check("https://hooks.example.org/", allow_loopback=False, resolve=resolver(address))


def test_one_internal_address_among_several_refuses_the_host():
    """Every address a name resolves to must be public, not just the first."""
    with pytest.raises(UrlRefused, match="10.1.2.3"):
        url_check(
            "https://hooks.example.org/",
            allow_loopback=False,
            resolve=resolver("93.184.216.34", "10.1.2.3"),
        )


def test_a_literal_metadata_address_is_refused_without_resolving():
    """An IP literal is checked as it is; the resolver is not asked."""
    resolve = resolver()
    with pytest.raises(UrlRefused, match="metadata"):
        url_check("https://169.254.169.254/latest", allow_loopback=True, resolve=resolve)
    assert resolve.calls == []  # type: ignore[attr-defined]


def test_http_is_refused_except_to_loopback_in_debug():
    """Plain http is refused for a public host, and for loopback unless allowed."""
    with pytest.raises(UrlRefused, match="must be https"):
        url_check("http://crm.example.org/", allow_loopback=True, resolve=resolver("93.184.216.34"))
    with pytest.raises(UrlRefused, match="loopback"):
        url_check("http://127.0.0.1:9000/hook", allow_loopback=False)
    target = url_check("http://127.0.0.1:9000/hook", allow_loopback=True)
    assert (target.address, target.port, target.path) == ("127.0.0.1", 9000, "/hook")


@pytest.mark.parametrize(
    "url", ["ftp://example.org/", "https://", "not a url", "https://user:pw@example.org/"]
)
def test_malformed_urls_are_refused(url):
    """Anything but http(s)://host/path without credentials is refused with a reason."""
    with pytest.raises(UrlRefused):
        url_check(url, allow_loopback=True, resolve=resolver("93.184.216.34"))


def test_a_host_that_does_not_resolve_is_refused():
    """A resolver error is a refusal, not a crash."""

    def fails(host: str, port: int) -> list[str]:
        raise OSError("Name or service not known")

    with pytest.raises(UrlRefused, match="does not resolve"):
        url_check("https://nowhere.example.org/", allow_loopback=False, resolve=fails)


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("100.64.0.1", "not a globally routable address"),
        ("100.127.255.254", "not a globally routable address"),
        ("2002:a9fe:a9fe::1", "carries 169.254.169.254, a cloud metadata address"),
        ("2002:0a00:0001::1", "carries 10.0.0.1, a private address"),
        ("fec0::1", "a site-local address"),
        ("64:ff9b::a9fe:a9fe", "carries 169.254.169.254, a cloud metadata address"),
        ("64:ff9b::6440:1", "carries 100.64.0.1, not a globally routable address"),
        ("::ffff:100.64.0.1", "carries 100.64.0.1, not a globally routable address"),
        ("::ffff:127.0.0.1", "carries 127.0.0.1, a loopback address"),
        # Teredo, client 10.0.0.1 (stored inverted in the last 32 bits)
        ("2001:0:4136:e378:8000:63bf:f5ff:fffe", "carries 10.0.0.1, a private address"),
        ("2001:db8::1", "a private address"),
    ],
)
def test_only_globally_routable_addresses_are_accepted(address, why):
    """Shared (carrier-grade NAT) space, site-local IPv6, and IPv6 forms that carry an
    internal IPv4 address (6to4, NAT64, IPv4-mapped, Teredo) are refused, whether the
    name resolves to them or the URL names them literally; loopback inside such a form is
    refused even where loopback itself is allowed."""
    with pytest.raises(UrlRefused, match=why):
        url_check("https://hooks.example.org/", allow_loopback=True, resolve=resolver(address))
    resolve = resolver()
    with pytest.raises(UrlRefused, match=why):
        url_check(
            f"https://[{address}]/" if ":" in address else f"https://{address}/",
            allow_loopback=True,
            resolve=resolve,
        )
    assert resolve.calls == []  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "address", ["2002:5db8:d822::1", "64:ff9b::5db8:d822", "::ffff:93.184.216.34"]
)
def test_a_translated_form_is_judged_by_the_public_address_inside(address):
    """6to4, NAT64 and IPv4-mapped forms of a public IPv4 address are public: the address
    inside decides, and the target keeps the address as resolved."""
    target = url_check("https://crm.example.org/", allow_loopback=False, resolve=resolver(address))
    assert ipaddress.ip_address(target.address) == ipaddress.ip_address(address)


@pytest.mark.django_db
@pytest.mark.engines("moto")
@pytest.mark.parametrize("address", ["100.64.0.1", "2002:a9fe:a9fe::1", "fec0::1"])
def test_dispatch_refuses_a_name_that_now_resolves_to_such_an_address(ddb, address):
    """At dispatch the name is checked again, as it resolves then: a registered host that
    now resolves into shared, 6to4-wrapped or site-local space is not sent to (the sender
    is never called) and the attempt records the refusal."""
    from reconciliation.acks.dispatch import acks_dispatch_once
    from reconciliation.acks.models import Endpoint, secret_new
    from reconciliation.acks.repository import AckRepository
    from tests.helpers import AS_SYSTEM
    from tests.reconciliation.factories import submit

    def never(*args, **kwargs):
        raise AssertionError("the sender was called")

    submit("moved-host")
    endpoint = Endpoint("E1", "acme", "https://crm.example.org/hooks", secret_new())
    acks_dispatch_once(
        AS_SYSTEM.store,
        endpoints_for=lambda tenant: [endpoint],
        resolve=resolver(address),
        sender=never,
    )
    stored = AckRepository(AS_SYSTEM.store).get("acme#moved-host")
    assert stored is not None
    [delivery] = stored.deliveries.values()
    assert delivery.attempts == 1 and address in (delivery.last_error or "")

"""Which URLs an acknowledgement may be sent to (docs/webhooks.md, docs/security.md): no
request forgery into the network. Checked at registration, and again for the resolved
address at every dispatch (a name may resolve elsewhere by then).

The resolver is passed in, so tests of a refused address never connect to it.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]

# Cloud metadata services: refused even where link-local addresses would not be.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)


class UrlRefused(ValueError):
    """The URL may not receive acknowledgements; the message says why."""


@dataclass(frozen=True)
class Target:
    """A checked URL: where to connect (a checked address) and what to ask for."""

    scheme: str
    host: str
    port: int
    path: str
    address: str


def system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


# The well-known NAT64 prefix (RFC 6052): the last 32 bits are the IPv4 address that the
# translator connects to.
NAT64_PREFIX = ipaddress.ip_network("64:ff9b::/96")


def embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (IPv4-mapped, NAT64, 6to4, Teredo's
    server and client): a packet to it reaches them, so they are checked too."""
    if address.ipv4_mapped is not None:
        return [address.ipv4_mapped]
    if address in NAT64_PREFIX:
        return [ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)]
    if address.sixtofour is not None:
        return [address.sixtofour]
    if address.teredo is not None:
        return list(address.teredo)
    return []


def _refusal(address: IpAddress, *, allow_loopback: bool) -> str | None:
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if address.is_loopback:
        return None if allow_loopback else "a loopback address (allowed only in debug or demo)"
    if isinstance(address, ipaddress.IPv6Address):
        inner = embedded_ipv4(address)
        for ipv4 in inner:
            # Loopback is allowed as itself only: a translated form of it is a way round
            # the rule, not a test set-up.
            why = _refusal(ipv4, allow_loopback=False)
            if why:
                return f"which carries {ipv4}, {why}"
        if inner and (address.ipv4_mapped is not None or address in NAT64_PREFIX):
            # These forms are the IPv4 address itself, reached through the host's stack
            # or a translator: the address inside decides (Python counts the prefixes
            # as reserved or private, which says nothing about where a packet goes).
            return None
        if address.is_site_local:
            # Deprecated, but still routed inside some networks, and not in Python's
            # private ranges.
            return "a site-local address"
    if address.is_multicast or address.is_reserved or address.is_unspecified:
        return "not a unicast public address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_private:
        return "a private address"
    if not address.is_global:
        # Shared address space (carrier-grade NAT, 100.64.0.0/10) and whatever else
        # IANA does not mark globally reachable.
        return "not a globally routable address"
    return None


def url_check(url: str, *, allow_loopback: bool, resolve: Resolver = system_resolver) -> Target:
    """The URL's target, or :class:`UrlRefused`: ``https`` only (``http`` to loopback
    when ``allow_loopback``), and every address its host resolves to must be public."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise UrlRefused(f"not a valid URL: {exc}") from exc
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise UrlRefused("the URL must be https://host/path")
    if parts.username or parts.password:
        raise UrlRefused("the URL may not carry a user name or password")
    host = parts.hostname
    port = port or (443 if parts.scheme == "https" else 80)
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            addresses = [ipaddress.ip_address(a.split("%", 1)[0]) for a in resolve(host, port)]
        except OSError as exc:
            raise UrlRefused(f"the host {host} does not resolve: {exc}") from exc
    if not addresses:
        raise UrlRefused(f"the host {host} does not resolve")
    for address in addresses:
        why = _refusal(address, allow_loopback=allow_loopback)
        if why:
            raise UrlRefused(f"{host} resolves to {address}, {why}")
    if parts.scheme == "http" and not all(a.is_loopback for a in addresses):
        raise UrlRefused("the URL must be https (http only to loopback in debug or demo)")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, host, port, path, str(addresses[0]))

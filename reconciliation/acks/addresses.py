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


def _refusal(address: IpAddress, *, allow_loopback: bool) -> str | None:
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if address.is_loopback:
        return None if allow_loopback else "a loopback address (allowed only in debug or demo)"
    if address.is_multicast or address.is_reserved or address.is_unspecified:
        return "not a unicast public address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_private:
        return "a private address"
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

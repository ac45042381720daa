"""Links to the pages whose path holds what a tenant chose (its name, a client's key):
built here, once, so that no page links somewhere else than it says."""

from __future__ import annotations

from urllib.parse import quote, urlencode

from django.urls import reverse

# Path segments a browser removes or climbs out of before it asks: the URL Standard reads
# "%2e" as ".", so no percent-encoding carries such a name in the path.
DOT_SEGMENTS = frozenset({".", ".."})


def _segment(text: str) -> str:
    """``text`` as one path segment: ``/``, ``\\`` (a browser's ``/`` too), ``?``, ``#``
    and ``%`` quoted, so it is never split; a dot inside a segment is harmless."""
    return quote(text, safe="")


def pledge_url(tenant: str, key: str) -> str:
    """The pledge page of ``tenant``'s ``key``: ``/pledges/<tenant>/<key>/``, each part one
    quoted segment; when either is ``.`` or ``..`` (both allowed), the two go in the query
    instead (``/pledges/?tenant=acme&key=..``)."""
    base = reverse("pledge-by-query")
    if tenant in DOT_SEGMENTS or key in DOT_SEGMENTS:
        return base + "?" + urlencode({"tenant": tenant, "key": key}, quote_via=quote)
    return f"{base}{_segment(tenant)}/{_segment(key)}/"

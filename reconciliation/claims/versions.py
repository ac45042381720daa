"""The intake request's schema versions (``Pledge-Version``, docs/api.md): each names its
normalisation rules, so a payload hash is always computed by the rules it was stored under.

A version is a date string, as Stripe pins API versions. The request names one in the
``Pledge-Version`` header (missing: the registry's current one); the claim and the pledge
store its name, and a replay is compared by hashing the new body by the *claim's*
version: a later change of a rule never turns an identical replay into a 422. A claim
stored before versions existed has none and reads as the first version, whose rules are
the rules it was hashed by.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from reconciliation.claims.request import InvalidRequest, PledgeRequest
from reconciliation.currencies import LEGACY_PLACES

VERSION_HEADER = "Pledge-Version"
VERSION_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


Rules = Callable[[PledgeRequest], dict[str, str]]


def _first_rules(request: PledgeRequest) -> dict[str, str]:
    return request.normalised()


def _two_places(request: PledgeRequest) -> dict[str, str]:
    """Every amount with two places ("1000.00" JPY), as hashed before minor units were
    per currency; for USD and every other two-place currency the same as the first rules."""
    return request.normalised(LEGACY_PLACES)


def _digest(canonical: dict[str, str]) -> str:
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class PledgeVersion:
    """One schema version: its name (``2026-12-01``), what it changed, its normalisation
    rules (a request's canonical form, which is hashed and stored), and the earlier forms
    a hash stored under its name may still be in. This is the one compatibility rule of
    stored hashes: a claim is judged by the rules of the version it names."""

    name: str
    summary: str
    normalise: Rules
    earlier: tuple[Rules, ...] = ()

    def canonical_json(self, request: PledgeRequest) -> str:
        return json.dumps(self.normalise(request), sort_keys=True, separators=(",", ":"))

    def payload_hash(self, request: PledgeRequest) -> str:
        return _digest(self.normalise(request))

    def hash_matches(self, request: PledgeRequest, stored: str) -> bool:
        """Whether ``stored`` (a claim's ``payload_hash``) is ``request`` hashed by this
        version's rules or one of its earlier forms."""
        return any(stored == _digest(rules(request)) for rules in (self.normalise, *self.earlier))


# The rules of the intake before versions existed, exactly: every payload hash already
# stored is this version's (tests/reconciliation/claims/test_pledge_versions.py). Claims
# written before minor units were per currency hashed every amount with two places.
FIRST = PledgeVersion(
    name="2026-12-01",
    summary="Codes upper-case, the amount in its currency's minor units.",
    normalise=_first_rules,
    earlier=(_two_places,),
)


class PledgeVersionRegistry:
    """Every version the intake knows, oldest first, and the current one (what a request
    without the header is read as)."""

    def __init__(self, *versions: PledgeVersion, current: str) -> None:
        self._versions = {v.name: v for v in versions}
        self.current_name = current

    @property
    def first(self) -> PledgeVersion:
        return next(iter(self._versions.values()))

    @property
    def current(self) -> PledgeVersion:
        return self._versions[self.current_name]

    def get(self, name: str) -> PledgeVersion | None:
        return self._versions.get(name)

    def names(self) -> list[str]:
        return list(self._versions)

    def stored(self, name: str | None) -> PledgeVersion:
        """The version a stored claim or pledge names; none (stored before versions
        existed) is the first. A name this code does not know is a bug upstream, not a
        request to refuse: it raises ``KeyError``."""
        return self.first if not name else self._versions[name]

    @contextmanager
    def extended(self, *versions: PledgeVersion, current: str | None = None) -> Iterator[None]:
        """Within the block, also ``versions``, and ``current`` as the current one (for a
        test of a rule change; a real version is added to :data:`VERSIONS` itself)."""
        saved = dict(self._versions), self.current_name
        self._versions.update({v.name: v for v in versions})
        if current is not None:
            self.current_name = current
        try:
            yield
        finally:
            self._versions, self.current_name = saved


VERSIONS = PledgeVersionRegistry(FIRST, current=FIRST.name)


def parse_pledge_version(raw: str | None) -> PledgeVersion:
    """The ``Pledge-Version`` header: missing or empty is the current version; a value
    that is not a date (``YYYY-MM-DD``) is ``invalid_pledge_version``; a date that names
    no version is ``unknown_pledge_version``. Either is a 400 and nothing is written."""
    if raw is None or raw.strip() == "":
        return VERSIONS.current
    value = raw.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    if not VERSION_RE.fullmatch(value):
        raise InvalidRequest(
            {VERSION_HEADER: "must be a version date such as " + VERSIONS.current.name},
            "invalid_pledge_version",
        )
    version = VERSIONS.get(value)
    if version is None:
        raise InvalidRequest(
            {VERSION_HEADER: "unknown version; known: " + ", ".join(VERSIONS.names())},
            "unknown_pledge_version",
        )
    return version

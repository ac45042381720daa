"""ISO 4217 currency codes accepted for pledges, and each one's minor units.

Both come from ISO 4217's own current list (the ``iso4217`` package ships the table
the maintenance agency publishes, List One): 2 places for most currencies, 0 for JPY,
KRW, CLP…, 3 for BHD, KWD, IQD…. This is the number of decimal places intake accepts
and writes (docs/design.md §4). The Unicode CLDR data (babel) was not
used: it takes whole amounts where a minor unit is unused in practice (HUF, IDR, COP,
IQD…), which ISO does not, and would refuse amounts ISO allows.

Accepted: every currency on the list with a numeric minor unit, except ISO's fund codes
(``IsFund``: BOV, CHE, CLF, USN…) and the units of account no donor pays in. A
withdrawn currency leaves the list with the package's next release (BGN when Bulgaria
adopted the euro; ANG for XCG; ZWL for ZWG).
"""

from __future__ import annotations

from decimal import Decimal

import iso4217

# Units of account on the list without ISO's fund flag: not currencies a pledge is paid in.
_UNITS_OF_ACCOUNT = frozenset({"UYW", "XAD"})


def _fund_codes() -> frozenset[str]:
    codes = set()
    for entry in iso4217.raw_xml.findall("CcyTbl/CcyNtry"):
        name, code = entry.find("CcyNm"), entry.find("Ccy")
        if name is not None and code is not None and name.get("IsFund"):
            codes.add((code.text or "").strip())
    return frozenset(codes)


def _current() -> dict[str, int]:
    """Code → minor units for every currency a pledge may be made in."""
    excluded = _fund_codes() | _UNITS_OF_ACCOUNT
    current = {}
    for code, entry in iso4217.raw_table.items():
        units = entry.get("CcyMnrUnts")
        if code and code not in excluded and isinstance(units, str) and units.isdigit():
            current[code] = int(units)
    return current


_MINOR_UNITS = _current()
ISO_4217 = frozenset(_MINOR_UNITS)

# Accepted before ISO withdrew them (the list intake kept before its per-currency rule), with their
# minor units: pledges and claims recorded in them are still read, hashed and replayed;
# new pledges in them are refused (``claims.funds.fund_check``).
WITHDRAWN = {"ANG": 2, "BGN": 2, "ZWL": 2}

# Amounts were written with exactly two places before minor units were per currency:
# requests hashed then are still recognised (reconciliation.claims.request).
LEGACY_PLACES = 2


def minor_units(currency: str) -> int:
    """Decimal places of ``currency``'s minor unit: 2 for USD, 0 for JPY, 3 for BHD; a
    withdrawn currency's as it was, and two for any other code (stored data is always
    readable)."""
    if currency in _MINOR_UNITS:
        return _MINOR_UNITS[currency]
    return WITHDRAWN.get(currency, LEGACY_PLACES)


def decimal_places(amount: Decimal) -> int:
    exponent = amount.as_tuple().exponent
    return -exponent if isinstance(exponent, int) and exponent < 0 else 0


def amount_text(amount: Decimal, currency: str, places: int | None = None) -> str:
    """``amount`` written with ``currency``'s minor units ("25.00" USD, "1000" JPY,
    "1.500" BHD). An amount recorded with more places than that (before minor units
    were per currency) keeps them: a written amount never loses a digit."""
    digits = minor_units(currency) if places is None else places
    if decimal_places(amount.normalize()) > digits:
        return f"{amount.normalize():f}"
    return f"{amount:.{digits}f}"

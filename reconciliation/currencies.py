"""ISO 4217 currency codes accepted for pledges, and each one's minor units.

The minor units come from babel (the Unicode CLDR's currency data): 2 for most, 0 for
JPY, KRW, CLP…, 3 for BHD, KWD, OMR…. CLDR follows ISO 4217 except where a minor unit
is not used in practice (HUF, IDR, COP, IQD… take whole amounts there); this is the
number of decimal places intake accepts and writes (DESIGN.md §4, changed in issue 14).

The allow-list stays hand-kept: babel lists every currency CLDR has ever named
(``list_currencies()`` includes DEM, FRF, ZWD…) and cannot tell a withdrawn one from a
current one without locale territory data, so it cannot replace the list of codes a
pledge may be made in.
"""

from __future__ import annotations

from decimal import Decimal
from functools import cache

from babel.numbers import get_currency_precision

ISO_4217 = frozenset(
    """
    AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BRL BSD
    BTN BWP BYN BZD CAD CDF CHF CLP CNY COP CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB
    EUR FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK
    JMD JOD JPY KES KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA
    MKD MMK MNT MOP MRU MUR MVR MWK MXN MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK
    PHP PKR PLN PYG QAR RON RSD RUB RWF SAR SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP STN
    SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS UAH UGX USD UYU UZS VES VND VUV WST
    XAF XCD XOF XPF YER ZAR ZMW ZWL
    """.split()
)

# Amounts were written with exactly two places before minor units were per currency:
# requests hashed then are still recognised (reconciliation.claims.request).
LEGACY_PLACES = 2


@cache
def minor_units(currency: str) -> int:
    """Decimal places of ``currency``'s minor unit: 2 for USD, 0 for JPY, 3 for BHD."""
    return int(get_currency_precision(currency))


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

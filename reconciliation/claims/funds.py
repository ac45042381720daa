"""Funds a tenant may pledge to (docs/design.md §3): each registered in one currency with the
largest single amount intake accepts for it. One fund code may be registered in several
currencies; each is its own ledger (``CODE#CURRENCY``).

The registry itself is kept by the edge (Django's database, ``dashboard.tenancy.models.Fund``);
the rules are here, on plain values, so intake refuses the same things wherever the
registry lives.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from reconciliation.claims.request import (
    FUND_RE,
    MAX_AMOUNT,
    InvalidRequest,
    PledgeRequest,
)
from reconciliation.currencies import (
    ISO_4217,
    WITHDRAWN,
    amount_text,
    decimal_places,
    minor_units,
)

UNKNOWN_FUND = "unknown_fund"
AMOUNT_OVER_LIMIT = "amount_over_limit"
# How many registered funds an unknown_fund answer names, at most.
NAMED_FUNDS = 20


@dataclass(frozen=True)
class Fund:
    code: str
    currency: str
    max_amount: Decimal

    @property
    def ledger_name(self) -> str:
        return f"{self.code}#{self.currency}"

    @property
    def max_amount_text(self) -> str:
        return amount_text(self.max_amount, self.currency)


def fund_check(request: PledgeRequest, funds: Iterable[Fund]) -> Fund:
    """The registered fund ``request`` pledges to, or :class:`InvalidRequest`:
    ``unknown_fund`` when the tenant has not registered the fund in this currency,
    ``amount_over_limit`` when the amount exceeds the fund's largest single amount.
    Nothing has been written when either is raised. A currency ISO has withdrawn is
    refused as such (it parses, so that keys recorded in it still replay)."""
    if request.currency in WITHDRAWN:
        raise InvalidRequest(
            {
                "currency": f"{request.currency} has been withdrawn from ISO 4217; pledges are "
                "no longer taken in it"
            },
            UNKNOWN_FUND,
        )
    registered = list(funds)
    for fund in registered:
        if fund.code == request.fund and fund.currency == request.currency:
            if request.amount > fund.max_amount:
                raise InvalidRequest(
                    {
                        "amount": f"larger than the largest single amount of {fund.code} "
                        f"in {fund.currency}: {fund.max_amount_text}"
                    },
                    AMOUNT_OVER_LIMIT,
                )
            return fund
    same_code = sorted(f.currency for f in registered if f.code == request.fund)
    if same_code:
        problem = (
            f"{request.fund} is not registered in {request.currency} "
            f"(registered in {', '.join(same_code)})"
        )
    else:
        names = sorted({f.ledger_name.replace("#", " ") for f in registered})
        shown = ", ".join(names[:NAMED_FUNDS]) + (", …" if len(names) > NAMED_FUNDS else "")
        problem = f"{request.fund} is not a registered fund" + (
            f" (registered: {shown})" if names else " (this tenant has no funds registered)"
        )
    raise InvalidRequest({"fund": problem}, UNKNOWN_FUND)


def fund_code_problem(code: str) -> str | None:
    if not FUND_RE.fullmatch(code):
        return "a fund code is 1-32 letters, digits, '_' or '-'"
    return None


def currency_problem(currency: str) -> str | None:
    if currency not in ISO_4217:
        return f"{currency!r} is not an ISO 4217 currency code"
    return None


def max_amount_problem(max_amount: Decimal, currency: str) -> str | None:
    """Why ``max_amount`` cannot be a fund's largest single amount in ``currency``."""
    if not max_amount.is_finite() or max_amount <= 0:
        return "the largest single amount must be greater than 0"
    if max_amount > MAX_AMOUNT:
        return f"the largest single amount is at most {MAX_AMOUNT}"
    places = minor_units(currency) if currency in ISO_4217 else 2
    if decimal_places(max_amount.normalize()) > places:
        return f"{currency} takes at most {places} decimal places"
    return None


def fund_parse(code: str, currency: str, max_amount: str | Decimal) -> Fund:
    """A fund from what a person typed: codes upper-cased, every problem named.
    Raises ``ValueError`` with the problems joined."""
    code, currency = code.strip().upper(), currency.strip().upper()
    try:
        amount = Decimal(str(max_amount).strip())
    except InvalidOperation:
        raise ValueError(f"{max_amount!r} is not a decimal amount") from None
    problems = [
        p
        for p in (
            fund_code_problem(code),
            currency_problem(currency),
            None if currency not in ISO_4217 else max_amount_problem(amount, currency),
        )
        if p
    ]
    if problems:
        raise ValueError("; ".join(problems))
    return Fund(code=code, currency=currency, max_amount=amount)


def funds_spec_parse(spec: str, *, default_currency: str, default_max: str) -> list[Fund]:
    """``DEFAULT_FUNDS``: a comma list of ``CODE[:CURRENCY[:MAX]]``, e.g.
    ``GENERAL:USD:1000000,GENERAL:EUR``. Raises ``ValueError`` naming the bad entry."""
    funds: list[Fund] = []
    for entry in (e.strip() for e in spec.split(",")):
        if not entry:
            continue
        parts = entry.split(":")
        if len(parts) > 3:
            raise ValueError(f"{entry!r}: expected CODE[:CURRENCY[:MAX]]")
        code = parts[0]
        currency = parts[1] if len(parts) > 1 and parts[1] else default_currency
        max_amount = parts[2] if len(parts) > 2 and parts[2] else default_max
        try:
            funds.append(fund_parse(code, currency, max_amount))
        except ValueError as exc:
            raise ValueError(f"{entry!r}: {exc}") from None
    return funds

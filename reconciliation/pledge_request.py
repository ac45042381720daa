"""Validation and normalisation of an intake request (DESIGN.md §4).

Every rejection names the field and why; nothing is written for a rejected request.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from decimal import Decimal, InvalidOperation

from reconciliation.currencies import ISO_4217, ZERO_DECIMAL

MAX_BODY_BYTES = 16 * 1024
MAX_AMOUNT = Decimal("999999999999.99")
FIELDS = ("donor_ref", "fund", "amount", "currency")
AMOUNT_RE = re.compile(r"^[0-9]{1,15}(\.[0-9]{1,})?$")
# Opaque references only: no spaces and no '@', so a name or an e-mail cannot pass.
DONOR_REF_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
FUND_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
KEY_RE = re.compile(r"^[\x21-\x7e](?:[\x20-\x7e]{0,253}[\x21-\x7e])?$")


class InvalidRequest(Exception):
    """The request is malformed; ``fields`` maps each offending field to the reason."""

    def __init__(self, fields: dict[str, str], code: str = "invalid_request"):
        super().__init__("; ".join(f"{k}: {v}" for k, v in fields.items()))
        self.fields = fields
        self.code = code


@dataclass(frozen=True)
class PledgeRequest:
    donor_ref: str
    fund: str
    amount: Decimal
    currency: str

    def normalised(self) -> dict[str, str]:
        """Canonical form: amount with exactly two decimals, codes upper-case."""
        return {
            "donor_ref": self.donor_ref,
            "fund": self.fund,
            "amount": f"{self.amount:.2f}",
            "currency": self.currency,
        }

    def canonical_json(self) -> str:
        return json.dumps(self.normalised(), sort_keys=True, separators=(",", ":"))

    @property
    def payload_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()

    @classmethod
    def from_normalised(cls, data: dict) -> PledgeRequest:
        return cls(
            donor_ref=data["donor_ref"],
            fund=data["fund"],
            amount=Decimal(data["amount"]),
            currency=data["currency"],
        )

    def as_dict(self) -> dict:
        return asdict(self)


def parse_idempotency_key(raw: str | None) -> str:
    """The ``Idempotency-Key`` header: 1–255 printable ASCII characters. A structured-field
    string (``"…"``), as the IETF draft writes it, is unquoted first."""
    if raw is None or raw == "":
        raise InvalidRequest({"Idempotency-Key": "required header is missing"}, "missing_key")
    value = raw
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    if len(value) > 255:
        raise InvalidRequest({"Idempotency-Key": "longer than 255 characters"}, "invalid_key")
    if not KEY_RE.match(value):
        raise InvalidRequest(
            {"Idempotency-Key": "must be 1-255 printable ASCII characters, no outer spaces"},
            "invalid_key",
        )
    return value


def parse_body(raw: bytes) -> PledgeRequest:
    if len(raw) > MAX_BODY_BYTES:
        raise InvalidRequest({"body": f"larger than {MAX_BODY_BYTES} bytes"}, "body_too_large")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise InvalidRequest({"body": "not valid UTF-8 JSON"}, "malformed_json") from None
    if not isinstance(data, dict):
        raise InvalidRequest({"body": "must be a JSON object"}, "malformed_json")
    return parse_fields(data)


def parse_fields(data: dict) -> PledgeRequest:
    errors: dict[str, str] = {}
    for name in sorted(set(data) - set(FIELDS)):
        errors[str(name)[:64]] = "unknown field"
    for name in FIELDS:
        if name not in data:
            errors[name] = "required"
        elif not isinstance(data[name], str):
            errors[name] = "must be a string" + (
                ' (a decimal string such as "25.00")' if name == "amount" else ""
            )
    if errors:
        raise InvalidRequest(errors)

    donor_ref = data["donor_ref"]
    if not DONOR_REF_RE.match(donor_ref):
        errors["donor_ref"] = (
            "must be an opaque reference: 1-64 letters, digits, '_', '.', ':' or '-' "
            "(never a name or an e-mail)"
        )
    fund = data["fund"]
    if not FUND_RE.match(fund):
        errors["fund"] = "must be 1-32 letters, digits, '_' or '-'"
    currency = data["currency"].upper()
    if currency not in ISO_4217:
        errors["currency"] = "unknown ISO 4217 currency code"
    amount_text = data["amount"]
    amount: Decimal | None = None
    if not AMOUNT_RE.match(amount_text):
        errors["amount"] = 'must be a decimal number such as "25.00"'
    else:
        try:
            amount = Decimal(amount_text)
        except InvalidOperation:
            errors["amount"] = 'must be a decimal number such as "25.00"'
    if amount is not None:
        places = -amount.as_tuple().exponent if amount.as_tuple().exponent < 0 else 0
        if amount <= 0:
            errors["amount"] = "must be greater than 0"
        elif places > 2:
            errors["amount"] = "at most 2 decimal places"
        elif amount > MAX_AMOUNT:
            errors["amount"] = f"at most {MAX_AMOUNT}"
        elif currency in ZERO_DECIMAL and amount != amount.to_integral_value():
            errors["amount"] = f"{currency} has no minor unit: a whole amount is required"
    if errors:
        raise InvalidRequest(errors)
    assert amount is not None
    return PledgeRequest(donor_ref=donor_ref, fund=fund.upper(), amount=amount, currency=currency)

"""Validation and normalisation of an intake request (docs/design.md §4).

Every rejection names the field and why; nothing is written for a rejected request.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import asdict, dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from reconciliation.currencies import (
    ISO_4217,
    WITHDRAWN,
    amount_text,
    decimal_places,
    minor_units,
)

MAX_BODY_BYTES = 16 * 1024
MAX_AMOUNT = Decimal("999999999999.99")
# The body is one flat object; nesting beyond this is refused before json.loads, which
# would otherwise recurse once per level (a RecursionError deep down, then a 500).
MAX_JSON_DEPTH = 16
FIELDS = ("donor_ref", "fund", "amount", "currency")
# Patterns are used with fullmatch only: ``$`` also matches before a final newline, and
# "GENERAL\n" became a ledger item of its own.
AMOUNT_RE = re.compile(r"[0-9]{1,15}(\.[0-9]{1,})?")
# Opaque references only: no spaces and no '@', so a name or an e-mail cannot pass.
DONOR_REF_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
FUND_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")
KEY_RE = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]{0,253}[\x21-\x7e])?")


def _text_problem(value: str) -> str | None:
    """Why ``value`` cannot be a code or reference at all, before its own pattern: a
    control or format character (newline, NUL, zero-width, bidi), or any non-ASCII
    character. Codes are compared byte for byte (keys, ledger items, the payload hash), so
    look-alikes are refused rather than folded: NFKC turns "uſd" into "usd" and
    full-width "ＧＥＮＥＲＡＬ" into "GENERAL", and the error says so."""
    if any(unicodedata.category(ch).startswith("C") for ch in value):
        return "must not contain control or invisible formatting characters"
    if not value.isascii():
        folded = unicodedata.normalize("NFKC", value)
        hint = f"; write {folded[:64]!r}" if folded.isascii() and folded.isprintable() else ""
        return "ASCII characters only" + hint
    return None


def _nesting_too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether JSON ``text`` opens more than ``limit`` arrays/objects inside each other;
    brackets inside strings are text."""
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return True
        elif ch in "]}":
            depth -= 1
    return False


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

    def normalised(self, places: int | None = None) -> dict[str, str]:
        """Canonical form: the amount with its currency's minor units ("25.00" USD,
        "1000" JPY, "1.500" BHD), codes upper-case."""
        return {
            "donor_ref": self.donor_ref,
            "fund": self.fund,
            "amount": amount_text(self.amount, self.currency, places),
            "currency": self.currency,
        }

    def canonical_json(self, places: int | None = None) -> str:
        return json.dumps(self.normalised(places), sort_keys=True, separators=(",", ":"))

    @property
    def payload_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()

    @classmethod
    def from_normalised(cls, data: dict[str, Any]) -> PledgeRequest:
        return cls(
            donor_ref=data["donor_ref"],
            fund=data["fund"],
            amount=Decimal(data["amount"]),
            currency=data["currency"],
        )

    def as_dict(self) -> dict[str, Any]:
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
    problem = _text_problem(value)
    if problem:
        raise InvalidRequest({"Idempotency-Key": problem}, "invalid_key")
    if not KEY_RE.fullmatch(value):
        raise InvalidRequest(
            {"Idempotency-Key": "must be 1-255 printable ASCII characters, no outer spaces"},
            "invalid_key",
        )
    return value


def parse_body(raw: bytes) -> PledgeRequest:
    if len(raw) > MAX_BODY_BYTES:
        raise InvalidRequest({"body": f"larger than {MAX_BODY_BYTES} bytes"}, "body_too_large")
    too_deep = InvalidRequest(
        {"body": f"nested more than {MAX_JSON_DEPTH} levels deep"}, "body_too_deep"
    )
    try:
        text = raw.decode("utf-8")
        if _nesting_too_deep(text):
            raise too_deep
        data = json.loads(text)
    except (UnicodeDecodeError, ValueError):
        raise InvalidRequest({"body": "not valid UTF-8 JSON"}, "malformed_json") from None
    except RecursionError:  # the check above keeps it out of reach; never a 500
        raise too_deep from None
    if not isinstance(data, dict):
        raise InvalidRequest({"body": "must be a JSON object"}, "malformed_json")
    return parse_fields(data)


def parse_fields(data: dict[str, Any]) -> PledgeRequest:
    errors = _shape_errors(data)
    if errors:
        raise InvalidRequest(errors)
    for name in FIELDS:
        problem = _text_problem(data[name])
        if problem:
            errors[name] = problem
    donor_ref, fund = data["donor_ref"], data["fund"]
    # ASCII only (checked above) before upper(): str.upper maps "ſ" to "S" and "ﬀ" to "FF".
    currency = data["currency"].upper()
    _code_check(errors, donor_ref=donor_ref, fund=fund, currency=currency)
    amount = None if "amount" in errors else _amount_parse(data["amount"], currency, errors)
    if errors:
        raise InvalidRequest(errors)
    assert amount is not None
    return PledgeRequest(donor_ref=donor_ref, fund=fund.upper(), amount=amount, currency=currency)


def _shape_errors(data: dict[str, Any]) -> dict[str, str]:
    """Fields unknown, missing, or not strings."""
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
    return errors


def _code_check(errors: dict[str, str], *, donor_ref: str, fund: str, currency: str) -> None:
    """The donor reference, fund and currency against their forms, unless refused already."""
    if "donor_ref" not in errors and not DONOR_REF_RE.fullmatch(donor_ref):
        errors["donor_ref"] = (
            "must be an opaque reference: 1-64 letters, digits, '_', '.', ':' or '-' "
            "(never a name or an e-mail)"
        )
    if "fund" not in errors and not FUND_RE.fullmatch(fund):
        errors["fund"] = "must be 1-32 letters, digits, '_' or '-'"
    if "currency" not in errors and currency not in ISO_4217 and currency not in WITHDRAWN:
        errors["currency"] = "unknown ISO 4217 currency code"


def _amount_parse(raw_amount: str, currency: str, errors: dict[str, str]) -> Decimal | None:
    """The amount in ``currency``, its zeros beyond the minor units dropped; ``None`` when
    it is no decimal number. What is refused is noted in ``errors``."""
    if not AMOUNT_RE.fullmatch(raw_amount):
        errors["amount"] = 'must be a decimal number such as "25.00"'
        return None
    try:
        amount = Decimal(raw_amount)
    except InvalidOperation:
        errors["amount"] = 'must be a decimal number such as "25.00"'
        return None
    # One rule (docs/security.md, "Amounts"): the amount must be exact in the
    # currency's minor units, so any non-zero digit beyond them is refused ("25.001"
    # USD, "1000.5" JPY); zeros beyond them change nothing and are dropped ("25.000"
    # USD is 25.00, "1000.0" JPY is 1000), whatever their number.
    allowed = minor_units(currency)
    significant = decimal_places(amount.normalize()) if amount else 0
    if amount <= 0:
        errors["amount"] = "must be greater than 0"
    elif significant > allowed and allowed == 0:
        errors["amount"] = f"{currency} has no minor unit: a whole amount is required"
    elif significant > allowed:
        errors["amount"] = f"{currency} takes at most {allowed} decimal places"
    elif amount > MAX_AMOUNT:
        errors["amount"] = f"at most {MAX_AMOUNT}"
    elif decimal_places(amount) > allowed:
        amount = amount.quantize(Decimal(1).scaleb(-allowed))  # only zeros dropped
    return amount

"""Path converters: what a URL segment may be before any view sees it."""

from __future__ import annotations

from reconciliation.cases.models import CASE_ID_PATTERN


class CaseIdConverter:
    """Only the shape ``case_id_for`` makes: a queue counter item (``#COUNT#…``) or an id
    over DynamoDB's key limit answers 404 here, before any view or read."""

    regex = CASE_ID_PATTERN

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


class AnyKeyConverter:
    """The client's own key, whatever it holds: Django's ``path`` converter (``.+``) stops
    at a newline, so ``k%0A`` answered an HTML 404; here the API itself refuses it (400)."""

    regex = "(?s:.+)"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value

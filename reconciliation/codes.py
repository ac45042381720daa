"""Stored codes with the words staff read for them.

Every code the system stores or shows — case types, states, queues, dispositions,
reason codes, audit actions, intake outcomes — is a member of a :class:`Code` enum
declared in its package's ``models.py``: the member is its stored string (it compares,
hashes and serialises as that string, so items and audit hashes are unchanged), and it
carries its label and a one-line explanation. That declaration is the one table of
labels; templates read ``code.label`` or a model's property, never a literal code.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Self


class Code(StrEnum):
    """A stored code; declare members as ``NAME = "NAME", "Label", "Explanation."``.

    Every subclass is registered, in declaration order, so a page can put words on a code
    without knowing its enum (:func:`find_code`); the first enum that names a value wins, so
    an enum declared later never relabels an earlier one's code."""

    label: str
    help: str

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _REGISTRY.append(cls)

    def __new__(cls, value: str, label: str = "", help: str = "") -> Self:
        member = str.__new__(cls, value)
        member._value_ = value
        member.label = label or value
        member.help = help
        return member

    @classmethod
    def of(cls, value: object) -> Self | None:
        """The member stored as ``value``, or None for anything else (old or hostile
        data is shown as given, never an error)."""
        try:
            return cls(str(value))
        except ValueError:
            return None

    @classmethod
    def read(cls, value: Any) -> Self:
        """A stored value as its member. A value no member names (an item written by
        hand, or by a later version) is kept as the plain string it is, so one odd item
        never stops a page from listing the rest; it compares unequal to every member."""
        member = cls.of(value)
        return member if member is not None else value

    @classmethod
    def words(cls, value: object) -> str:
        """The label of ``value``; an unknown code as given."""
        member = cls.of(value)
        return member.label if member is not None else str(value or "")


_REGISTRY: list[type[Code]] = []


def find_code(value: object) -> Code | None:
    """The member of any code enum stored as ``value`` (the first enum declared that names
    it), or None."""
    if value is None or value == "":
        return None
    text = str(value)
    for enum in _REGISTRY:
        member = enum.of(text)
        if member is not None:
            return member
    return None

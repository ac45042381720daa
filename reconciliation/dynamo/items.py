"""Translation between plain Python values and DynamoDB attribute values.

Numbers come back from DynamoDB as ``Decimal``; integral ones are turned into ``int``
so plain values round-trip (the audit hash depends on it). Money stays ``Decimal``
where a repository says so explicitly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast, overload

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef, TransactWriteItemTypeDef

# An item in DynamoDB's low-level form, as read or built: attribute name -> ``{"S": ...}``.
RawItem = Mapping[str, Mapping[str, Any]]

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def to_item(values: dict[str, Any]) -> dict[str, AttributeValueTypeDef]:
    return {k: _serializer.serialize(v) for k, v in values.items() if v is not None}


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, set):
        return {_plain(v) for v in value}
    return value


# An item boto3 returns is typed ``dict[str, AttributeValueTypeDef]``; the overloads
# let a caller that holds an item get a plain ``dict`` back without a None check.
@overload
def from_item(item: Mapping[str, Any]) -> dict[str, Any]: ...
@overload
def from_item(item: None) -> None: ...
@overload
def from_item(item: Mapping[str, Any] | None) -> dict[str, Any] | None: ...
def from_item(item: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if item is None:
        return None
    return {k: _plain(_deserializer.deserialize(v)) for k, v in item.items()}


def values(**named: Any) -> dict[str, AttributeValueTypeDef]:
    """``ExpressionAttributeValues`` from keyword arguments: ``values(v=1)`` → ``{":v": …}``."""
    return {f":{k}": _serializer.serialize(v) for k, v in named.items()}


def transact_items(items: Sequence[Mapping[str, Any]]) -> list[TransactWriteItemTypeDef]:
    """The transaction items the repositories build (plain dicts of ``Put``, ``Update``,
    ``ConditionCheck``), typed as ``TransactWriteItems`` takes them. One cast, here, at the
    boundary, instead of a TypedDict per builder."""
    return cast("list[TransactWriteItemTypeDef]", list(items))

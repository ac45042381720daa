"""Item sizes and write units by DynamoDB's documented rules ("Item sizes and formats",
"Read/write capacity units", "Provisioned throughput considerations for global secondary
indexes" in the AWS Developer Guide), so a cost can be computed from what a write stores
rather than only read back from what an engine chooses to report.

Sizing (low-level ``AttributeValue`` form, as boto3's client speaks it):

- attribute names, map keys and strings: UTF-8 bytes;
- numbers: "approximately" 1 byte per two significant digits (leading and trailing
  zeros trimmed), plus 1 byte; exactly, as the engine counts (``number_size``): one byte
  per base-100 digit pair aligned on the decimal point, plus 1, plus 1 if negative;
- binary: raw length; ``NULL`` and ``BOOL``: 1 byte;
- list and map: 3 bytes, plus 1 byte per element, plus the elements (a map's keys count
  like attribute names);
- sets: the sum of their elements.

Writes: ``ceil(size / 1024)`` units, at least 1. An update is billed on the larger of
the item before and after it; a transactional write costs twice. A global secondary
index is written when the write changes what the index holds: an entry appearing or
disappearing is one write, a changed index key is two (delete the old entry, put the
new), a changed projected attribute is one, anything else none.

What DynamoDB Local was found to do (checked by tests/reconciliation/dynamo/
test_item_size.py at 1,023 / 1,024 / 1,025 bytes):

- Numbers: the engine counts base-100 digit pairs aligned on the decimal point, which
  the documented "1 byte per two significant digits" approximates. They differ when the
  significant digits straddle the point at an odd offset (``110.90`` and ``110.9`` are
  4 bytes, not 3; ``12.5`` is 3 either way) and for negatives (1 byte more: ``-1`` is 3).
  ``item_size`` follows the engine; ``documented_number_size`` is the guide's figure.
- Everything else (strings, multibyte UTF-8, binary, NULL/BOOL, sets, and the 3 bytes
  plus 1 byte per element of lists and maps) is counted exactly as documented.
- Index writes: the 100 bytes AWS adds per index entry for *storage* do not count
  towards index *write* units: an ``ALL`` entry of 1,024 bytes costs 1 unit, not 2
  (``INDEX_ENTRY_OVERHEAD`` is 0).
- An entry whose projected attributes change, key unchanged, costs the units of the
  larger of its old and new entry (an update is billed like the base item's); a key
  change costs the old entry's units plus the new entry's.
- A write whose condition fails reports no ``ConsumedCapacity`` at all, although AWS
  bills it (the existing item's size, at least 1 unit): compute it from ``ALL_OLD``.
- ``TransactWriteItems`` reports every unit doubled, index units included; but with
  several items in one table it adds up only the *distinct* per-item figures (three
  1-unit puts report 2 units, not 6; a 2-unit case with two 1-unit counter shards
  reports 6, not 8). AWS bills each item: ``write_cost`` per item, summed, is the bill.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from reconciliation.dynamo.items import RawItem
    from reconciliation.dynamo.tables import Index, Table

WRITE_UNIT_BYTES: Final = 1024
READ_UNIT_BYTES: Final = 4096
# AWS adds 100 bytes per index entry when it bills index *storage*; whether the same
# overhead counts towards an index *write* is settled against the engine (module doc).
INDEX_ENTRY_OVERHEAD: Final = 0


def _utf8(text: str) -> int:
    return len(text.encode("utf-8"))


def documented_number_size(text: str) -> int:
    """The Developer Guide's approximation: 1 byte per two significant digits, plus 1."""
    digits = Decimal(text).normalize().as_tuple().digits
    significant = len(digits) if any(digits) else 0
    return math.ceil(significant / 2) + 1


def number_size(text: str) -> int:
    """Bytes of a DynamoDB number as the engine stores it: one byte per base-100 digit
    pair, pairs aligned on the decimal point (``110.9`` is ``1|10|.90``: 3 pairs), zero
    pairs at either end trimmed, plus 1 byte (exponent), plus 1 more when negative."""
    sign, digits, exponent = Decimal(text).normalize().as_tuple()
    if not any(digits):
        return 1
    assert isinstance(exponent, int)
    lowest, highest = exponent, exponent + len(digits) - 1  # powers of ten
    pairs = highest // 2 - lowest // 2 + 1
    return pairs + 1 + sign


def value_size(value: Mapping[str, Any]) -> int:
    """Bytes of one ``AttributeValue`` (without its attribute name)."""
    ((kind, data),) = value.items()
    if kind == "S":
        return _utf8(data)
    if kind == "N":
        return number_size(data)
    if kind == "B":
        return len(data.encode("utf-8") if isinstance(data, str) else data)
    if kind in ("NULL", "BOOL"):
        return 1
    if kind == "SS":
        return sum(_utf8(s) for s in data)
    if kind == "NS":
        return sum(number_size(n) for n in data)
    if kind == "BS":
        return sum(len(b) for b in data)
    if kind == "L":
        return 3 + sum(1 + value_size(v) for v in data)
    if kind == "M":
        return 3 + sum(1 + _utf8(k) + value_size(v) for k, v in data.items())
    raise ValueError(f"unknown attribute type {kind!r}")


def item_size(item: RawItem) -> int:
    """Bytes of an item as DynamoDB counts them: each attribute's name plus its value."""
    return sum(_utf8(name) + value_size(value) for name, value in item.items())


def write_units(size_bytes: int) -> int:
    """Write capacity units for one non-transactional write of ``size_bytes``."""
    return max(1, math.ceil(size_bytes / WRITE_UNIT_BYTES))


def read_units(size_bytes: int, *, consistent: bool) -> float:
    """Read capacity units for reading ``size_bytes`` (4 KB steps, at least one step);
    an eventually consistent read costs half."""
    steps = max(1, math.ceil(size_bytes / READ_UNIT_BYTES))
    return float(steps) if consistent else steps / 2


def _key_names(table: Table, index: Index) -> list[str]:
    names = [table.hash_key[0]] + ([table.range_key[0]] if table.range_key else [])
    for name, _kind in index.attributes():
        if name not in names:
            names.append(name)
    return names


def index_entry(
    item: RawItem | None, table: Table, index: Index
) -> dict[str, Mapping[str, Any]] | None:
    """The item ``index`` holds for ``item``: table and index keys plus what the index
    projects; ``None`` when the item lacks an index key attribute (a sparse index)."""
    if item is None or any(name not in item for name, _kind in index.attributes()):
        return None
    projection = index.projection.get("ProjectionType", "ALL")
    if projection == "ALL":
        return dict(item)
    keep = _key_names(table, index)
    if projection == "INCLUDE":
        keep += [a for a in index.projection.get("NonKeyAttributes", []) if a not in keep]
    return {name: item[name] for name in keep if name in item}


def _entry_units(entry: RawItem) -> int:
    return write_units(item_size(entry) + INDEX_ENTRY_OVERHEAD)


def index_write_units(
    before: RawItem | None,
    after: RawItem | None,
    table: Table,
    index: Index,
) -> int:
    """Write units ``index`` consumes when an item goes from ``before`` to ``after``
    (``None``: absent), by the documented global secondary index rules."""
    old, new = index_entry(before, table, index), index_entry(after, table, index)
    if old is None or new is None:
        # An entry appears (one put) or disappears (one delete of the old entry).
        present = new if old is None else old
        return 0 if present is None else _entry_units(present)
    keys = [name for name, _kind in index.attributes()]
    if any(old[k] != new[k] for k in keys):
        return _entry_units(old) + _entry_units(new)
    if old == new:
        return 0
    # Key unchanged, a projected attribute changed: one write, billed like an update.
    return max(_entry_units(old), _entry_units(new))


def write_cost(
    before: RawItem | None,
    after: RawItem | None,
    table: Table,
    *,
    transactional: bool,
) -> dict[str, int]:
    """Units one write consumes, on the table (key ``table.name``) and on each index it
    touches (key: the index name; indexes it leaves alone are left out)."""
    factor = 2 if transactional else 1
    size = max(item_size(before or {}), item_size(after or {}))
    cost = {table.name: write_units(size) * factor}
    for index in table.indexes:
        units = index_write_units(before, after, table, index)
        if units:
            cost[index.name] = units * factor
    return cost

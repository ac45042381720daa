"""The suite's own scheduling (tests/conftest.py · pytest_collection_modifyitems): files
with long tests are handed out first, so under xdist none starts last and runs alone."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import pytest_collection_modifyitems


@dataclass
class FakeItem:
    path: Path
    name: str
    marks: set[str] = field(default_factory=set)

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.marks else None


def test_long_files_go_first_then_the_largest_files_each_kept_whole_and_in_order():
    items = [
        FakeItem(Path("a.py"), "a1"),
        FakeItem(Path("b.py"), "b1"),
        FakeItem(Path("b.py"), "b2"),
        FakeItem(Path("b.py"), "b3"),
        FakeItem(Path("c.py"), "c1"),
        FakeItem(Path("c.py"), "c2", {"long"}),
        FakeItem(Path("d.py"), "d1", {"long"}),
        FakeItem(Path("d.py"), "d2", {"long"}),
    ]
    pytest_collection_modifyitems(None, items)  # type: ignore[arg-type]
    assert [i.name for i in items] == ["d1", "d2", "c1", "c2", "b1", "b2", "b3", "a1"]

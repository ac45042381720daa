"""Every code reference in the docs resolves: a `path` names a file of the repository,
and a `path` · `name` a function, class, method or constant defined in it. The docs are
how a newcomer finds the code; a reference that no longer resolves sends them nowhere."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([*ROOT.glob("docs/*.md"), ROOT / "README.md"])
# `some/path.ext` (with a directory), optionally followed by " · `Name.attr`".
REFERENCE = re.compile(
    r"`(?P<path>(?:[\w.-]+/)+[\w.-]+\.(?:py|md|html|js|css|toml|txt|sh))`"
    r"(?:\s*·\s*`?(?P<name>[A-Za-z_][\w.]*)`?)?"
)


def references() -> list[tuple[str, str, str | None]]:
    found = []
    for doc in DOCS:
        for match in REFERENCE.finditer(doc.read_text()):
            found.append((doc.name, match["path"], match["name"]))
    return found


def _defined(tree: ast.Module, dotted: str) -> bool:
    """Whether ``dotted`` (``name`` or ``Class.member``) is defined at module level."""
    head, _, rest = dotted.partition(".")
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name != head:
                continue
            if not rest:
                return True
            return isinstance(node, ast.ClassDef) and _member(node, rest)
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == head for t in targets) and not rest:
            return True
    return False


def _member(cls: ast.ClassDef, name: str) -> bool:
    for node in cls.body:
        if (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and node.name == name
        ):
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
    return False


def test_the_docs_name_code():
    """The check has something to check (a regex that matched nothing would pass)."""
    assert len(references()) > 40


@pytest.mark.parametrize(("doc", "path", "name"), references())
def test_reference_resolves(doc, path, name):
    """The file exists, and the name after ' · ' is defined in it."""
    target = ROOT / path
    assert target.is_file(), f"{doc}: `{path}` is not a file of the repository"
    if name and target.suffix == ".py":
        tree = ast.parse(target.read_text())
        assert _defined(tree, name), f"{doc}: `{path}` · `{name}` is not defined there"


def test_a_broken_reference_is_caught(tmp_path):
    """The resolver itself fails on a name the file does not define."""
    tree = ast.parse("def real():\n    pass\nclass K:\n    def m(self): ...\nX = 1\n")
    assert _defined(tree, "real") and _defined(tree, "K.m") and _defined(tree, "X")
    assert not _defined(tree, "gone") and not _defined(tree, "K.gone")

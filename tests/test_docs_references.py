"""Every code reference in the docs and in the code's own comments resolves: a `path`
names a file of the repository, and a `path` · `name` a function, class, method or
constant defined in it. The docs are how a newcomer finds the code, and a comment that
says where a rule's other half lives is how a reader follows it; a reference that no
longer resolves sends them nowhere."""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([*ROOT.glob("docs/*.md"), ROOT / "README.md"])
# `some/path.ext` (with a directory), optionally followed by " · `Name.attr`".
REFERENCE = re.compile(
    r"`(?P<path>(?:[\w.-]+/)+[\w.-]+\.(?:py|md|html|js|css|toml|txt|sh))`"
    r"(?:\s*·\s*`?(?P<name>[A-Za-z_][\w.]*)`?)?"
)


# In comments and docstrings a path is written bare or in reST's double backticks:
# reconciliation/claims/intake.py · ``pledge_commit``. Only paths under the project's
# own top-level folders count, so an example path in a test's data is not mistaken.
CODE_REFERENCE = re.compile(
    r"(?<![\w/.-])(?P<path>(?:reconciliation|dashboard|tests|bench|bin|docs|templates"
    r"|static|deploy)/[\w/.-]*[\w-]\.(?:py|md|html|js|css|toml|txt|sh|json|yaml|yml))"
    r"`{0,2}(?:\s*·\s*`{0,2}(?P<name>[A-Za-z_][\w.]*)`{0,2})?"
)
TEMPLATE_COMMENT = re.compile(r"\{#.*?#\}|\{% comment %\}.*?\{% endcomment %\}", re.DOTALL)


def references() -> list[tuple[str, str, str | None]]:
    found = []
    for doc in DOCS:
        for match in REFERENCE.finditer(doc.read_text()):
            found.append((doc.name, match["path"], match["name"]))
    return found


def python_prose(source: str) -> list[str]:
    """The comments and docstrings of a Python module: where it speaks to a reader."""
    prose = [
        token.string
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            docstring = ast.get_docstring(node, clean=False)
            if docstring:
                prose.append(docstring)
    return prose


def code_references() -> list[tuple[str, str, str | None]]:
    names = subprocess.run(
        ["git", "ls-files", "--", "*.py", "*.html"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found = []
    for name in names:
        source = (ROOT / name).read_text()
        is_python = name.endswith(".py")
        prose = python_prose(source) if is_python else TEMPLATE_COMMENT.findall(source)
        for text in prose:
            for match in CODE_REFERENCE.finditer(text):
                found.append((name, match["path"], match["name"]))
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


def test_the_comments_name_code():
    assert len(code_references()) > 200


def unresolved(found: list[tuple[str, str, str | None]]) -> list[str]:
    """What in ``found`` does not resolve: the file is missing, or the name after ' · '
    is not defined in it."""
    wrong = []
    trees: dict[Path, ast.Module] = {}
    for where, path, name in found:
        target = ROOT / path
        if not target.is_file():
            wrong.append(f"{where}: `{path}` is not a file of the repository")
        elif name and target.suffix == ".py":
            tree = trees.get(target) or trees.setdefault(target, ast.parse(target.read_text()))
            if not _defined(tree, name):
                wrong.append(f"{where}: `{path}` · `{name}` is not defined there")
    return wrong


def test_every_doc_reference_resolves():
    wrong = unresolved(references())
    assert not wrong, "\n".join(wrong)


def test_every_comment_reference_resolves():
    wrong = unresolved(code_references())
    assert not wrong, "\n".join(wrong)


def test_a_broken_reference_is_caught(tmp_path):
    """The resolver itself fails on a name the file does not define."""
    tree = ast.parse("def real():\n    pass\nclass K:\n    def m(self): ...\nX = 1\n")
    assert _defined(tree, "real") and _defined(tree, "K.m") and _defined(tree, "X")
    assert not _defined(tree, "gone") and not _defined(tree, "K.gone")


def test_a_stale_comment_path_is_caught():
    """A comment and a docstring are read; a path that moved is reported, one that did
    not is not."""
    source = (
        '"""Counts go to reconciliation/metrics.py · ``gone_name``."""\n'
        "# the rule's other half: reconciliation/nowhere.py\n"
        "X = 'reconciliation/in_a_string.py'\n"
    )
    found = [
        ("m.py", match["path"], match["name"])
        for text in python_prose(source)
        for match in CODE_REFERENCE.finditer(text)
    ]
    assert {path for _, path, _ in found} == {
        "reconciliation/metrics.py",
        "reconciliation/nowhere.py",
    }
    assert len(unresolved(found)) == 2

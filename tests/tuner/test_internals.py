"""No private member of Ray, Optuna, torch (or any other library) is used outside the two
compatibility modules, tests and benchmarks included.

A private member is a name whose own name starts with `_` however it is reached: an import
(`ray.train.v2._internal`, `from x import _Bracket`), an attribute of a library's object
(`torch._dynamo`, `trial._trial_id`), or `self._x` in a subclass of a library's class.
Undocumented attributes a library reads off our objects (`optimizer.found_inf`) count too.
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPAT = {ROOT / "tuner" / "_compat.py", ROOT / "trainables" / "_compat.py"}
SCANNED = ("tuner", "trainables", "tests", "benchmarks")
UNDOCUMENTED = {"found_inf"}          # not underscored, but a library's undocumented attribute
DOCUMENTED = {"_exit"}                # underscored, but documented public API (os._exit)
OURS = {"tuner", "trainables"}


def sources() -> list[Path]:
    return sorted(p for d in SCANNED for p in (ROOT / d).rglob("*.py") if p not in COMPAT)


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def own_names(files: list[Path]) -> tuple[set[str], set[str]]:
    """The private names our own code defines (module-level functions, classes, variables and
    attributes our classes set on themselves), and the names of our classes."""
    names, classes = set(), set()
    for p in files:
        tree = ast.parse(p.read_text(), str(p))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
                if isinstance(node, ast.ClassDef):
                    classes.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for a in node.names:
                    names.add(a.asname or a.name.split(".")[0])
    for p in files:   # attributes our own classes (no library base) set on themselves
        for cls in (n for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.ClassDef)):
            if all(b in classes or b in ("object", "") for b in base_names(cls)):
                names |= {n.attr for n in ast.walk(cls) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
                          and isinstance(n.value, ast.Name) and n.value.id == "self"}
    return {n for n in names if private(n)}, classes


def base_names(cls: ast.ClassDef) -> list[str]:
    return [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in cls.bases]


def foreign_module(mod: str | None) -> bool:
    return bool(mod) and mod.split(".")[0] not in OURS


def uses(path: Path, own_private: set[str], own_classes: set[str], root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    rel = path.relative_to(root)
    out = []

    def add(node: ast.AST, what: str) -> None:
        out.append(f"{rel}:{node.lineno}: {what}")

    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        bases = base_names(cls)
        if any(b not in own_classes and b not in ("object", "") for b in bases):
            for node in ast.walk(cls):
                if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
                        and private(node.attr)):
                    add(node, f"self.{node.attr} in {cls.name}, a subclass of {', '.join(bases)}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if foreign_module(a.name) and any(private(p) for p in a.name.split(".")):
                    add(node, f"import {a.name}")
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level == 0 and foreign_module(mod):
                if any(private(p) for p in mod.split(".")):
                    add(node, f"from {mod} import ...")
                for a in node.names:
                    if private(a.name):
                        add(node, f"from {mod} import {a.name}")
        elif isinstance(node, ast.Attribute):
            if node.attr in UNDOCUMENTED:
                add(node, f".{node.attr} (undocumented)")
            elif (private(node.attr) and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                  and node.attr not in own_private and node.attr not in DOCUMENTED):
                add(node, f".{node.attr}")
    return out


def test_private_members_of_libraries_are_used_only_in_the_compat_modules():
    files = sources()
    own_private, own_classes = own_names(files)
    found = [u for p in files for u in uses(p, own_private, own_classes)]
    assert not found, "private members used outside tuner/_compat.py and trainables/_compat.py:\n" + "\n".join(found)


@pytest.mark.parametrize("snippet, expected", [
    ("from ray.tune.schedulers.async_hyperband import _Bracket", "_Bracket"),
    ("import ray._private.services", "ray._private.services"),
    ("import torch\ntorch._dynamo.reset()", "._dynamo"),
    ("from optuna.samplers import TPESampler\nclass S(TPESampler):\n    def f(self):\n        return self._random_sampler",
     "self._random_sampler"),
    ("def f(opt):\n    return opt.found_inf", "found_inf"),
    ("def f(t):\n    return t._trial_id", "._trial_id"),
])
def test_the_check_finds_each_kind_of_use(tmp_path, snippet, expected):
    p = tmp_path / "m.py"
    p.write_text(snippet)
    found = uses(p, *own_names([p]), root=tmp_path)
    assert any(expected in u for u in found), found


def test_the_check_leaves_our_own_private_names_alone(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("class A:\n    def __init__(self):\n        self._x = 1\n\ndef _helper(a):\n    return a._x\n")
    assert uses(p, *own_names([p]), root=tmp_path) == []


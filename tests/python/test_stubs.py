"""The type stubs (vigil/_vigil.pyi) name exactly what the extension has."""
import ast
import os

import vigil
from vigil import _vigil


def _stub_names():
    path = os.path.join(os.path.dirname(vigil.__file__), "_vigil.pyi")
    tree = ast.parse(open(path).read())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = {n.name for n in node.body
                              if isinstance(n, ast.FunctionDef) and not n.name.startswith("__")} | {
                n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
        elif isinstance(node, ast.FunctionDef):
            out[node.name] = None
    return out


def test_stubs_match_the_module():
    stubs = _stub_names()
    public = {n for n in dir(_vigil) if not n.startswith("_")}
    assert set(stubs) == public
    for name, members in stubs.items():
        if members is None:
            continue
        obj = getattr(_vigil, name)
        actual = {n for n in dir(obj) if not n.startswith("_")}
        if issubclass(obj, BaseException):
            actual -= set(dir(Exception))
        if name == "CompileError":
            continue  # diagnostics is set per instance
        assert members == actual, name


def test_package_exports():
    assert set(vigil.__all__) == {n for n in dir(_vigil) if not n.startswith("_")}

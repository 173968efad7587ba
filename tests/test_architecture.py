"""The goals of the tree's shape (issue 16), checked on every CPU run.

* No module under cupric/ uses another subpackage's private name: a ``_``-prefixed
  module, or a ``_``-prefixed name imported from, or read as an attribute of, a module of
  a different top-level subpackage. The root package's own private modules
  (`cupric._config`, `cupric._paths`, `cupric._cache`, `cupric._lazy`...) are the shared
  bottom layer and free to use. A package offers what others need under a public name
  (`cupric.runtime.native`, `cupric.runtime.resource`, ...).
* No module under cupric/ is longer than `MAX_LINES`, except the generated code and
  declaration tables of `LONG_MODULES`.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "cupric"

MAX_LINES = 700

#: Modules allowed over `MAX_LINES`, each with the reason. Only generated code and
#: declaration tables belong here for good; the entries marked "issue 16" are modules
#: still to be split by concept, which issue 16 leaves open.
LONG_MODULES: dict[str, str] = {
    # None today. Generated code or a declaration table may be listed, with the reason.
}

#: Cross-package private uses still in the tree: (importing module, what it uses), each
#: with the issue that removes it. None today.
KNOWN_PRIVATE_USES: set[tuple[str, str]] = set()


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield path, ".".join(parts)


def _subpackage(dotted: str) -> str | None:
    """The top-level subpackage a module belongs to (`cupric.runtime.memory` ->
    "runtime"), or None for the root package and its own modules (`cupric._config`)."""
    parts = dotted.split(".")
    if len(parts) < 2 or parts[0] != "cupric":
        return None
    if len(parts) == 2 and not (ROOT / parts[1]).is_dir():
        return None  # a module of the root package itself
    return parts[1]


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _absolute(module: str, node: ast.ImportFrom, package: str) -> str:
    if node.level == 0:
        return node.module or ""
    base = package.split(".")
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def private_uses(path: pathlib.Path, dotted: str) -> list[tuple[int, str]]:
    """``(line, what)`` for every use in the module of another subpackage's private name."""
    own = _subpackage(dotted)
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = dotted if path.name == "__init__.py" else dotted.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    foreign_modules: dict[str, str] = {}  # local name -> module of another subpackage

    def foreign(module: str) -> bool:
        sub = _subpackage(module)
        return sub is not None and sub != own

    def private_module(module: str) -> bool:
        return any(_private(part) for part in module.split(".")[2:])

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if foreign(alias.name):
                    if private_module(alias.name):
                        found.append((node.lineno, alias.name))
                    if alias.asname:
                        foreign_modules[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(dotted, node, package)
            if not foreign(module):
                continue
            if private_module(module):
                found.append((node.lineno, module))
                continue
            for alias in node.names:
                if _private(alias.name):
                    found.append((node.lineno, f"{module}.{alias.name}"))
                elif (ROOT.parent / (module.replace(".", "/") + "/" + alias.name)).is_dir() \
                        or (ROOT.parent / (module.replace(".", "/") + "/" + alias.name
                                           + ".py")).is_file():
                    foreign_modules[alias.asname or alias.name] = f"{module}.{alias.name}"
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in foreign_modules and _private(node.attr)):
            found.append((node.lineno, f"{foreign_modules[node.value.id]}.{node.attr}"))
    return found


def test_no_module_uses_another_packages_private_names():
    problems, seen = [], set()
    for path, dotted in _modules():
        for line, what in private_uses(path, dotted):
            seen.add((dotted, what))
            if (dotted, what) not in KNOWN_PRIVATE_USES:
                problems.append(f"{path.relative_to(ROOT.parent)}:{line}: {what}")
    assert not problems, ("private names of another cupric subpackage (offer a public "
                          "name instead):\n" + "\n".join(problems))
    stale = sorted(KNOWN_PRIVATE_USES - seen)
    assert not stale, f"KNOWN_PRIVATE_USES lists uses that are gone: {stale}"


def test_no_module_is_too_long():
    problems, lengths = [], {}
    for path, dotted in _modules():
        name = str(path.relative_to(ROOT.parent))
        lengths[name] = len(path.read_text(encoding="utf-8").splitlines())
        if lengths[name] > MAX_LINES and name not in LONG_MODULES:
            problems.append(f"{name}: {lengths[name]} lines")
    assert not problems, (f"modules over {MAX_LINES} lines (split them by concept):\n"
                          + "\n".join(problems))
    short = sorted(name for name in LONG_MODULES if lengths.get(name, 0) <= MAX_LINES)
    assert not short, f"LONG_MODULES lists modules now short enough (remove them): {short}"


def test_the_checks_see_a_private_use(tmp_path):
    """The scanner itself: each form of a cross-package private use is caught, and the
    package's own private names and the root's are not."""
    module = ROOT / "optix" / "_probe_for_test.py"
    text = ("from cupric.compiler.codegen import _helper\n"
            "from cupric.runtime._cext import open_extension\n"
            "import cupric.compiler._abi\n"
            "from cupric.runtime import memory\n"
            "memory._Allocation\n"
            "from cupric import _config\n"
            "from . import _declarations\n"
            "from cupric.runtime.native import Extension\n")
    source = tmp_path / "probe.py"
    source.write_text(text)
    found = sorted(what for _, what in private_uses(source, "cupric.optix._probe_for_test"))
    assert not module.exists()
    assert found == ["cupric.compiler._abi", "cupric.compiler.codegen._helper",
                     "cupric.runtime._cext", "cupric.runtime.memory._Allocation"]

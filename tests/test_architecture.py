"""The goals of the tree's shape (issue 16), checked on every CPU run.

* No module under cupric/ uses another subpackage's private name: a ``_``-prefixed
  module, or a ``_``-prefixed name imported from, or read as an attribute of, a module of
  a different top-level subpackage. The root package's own private modules
  (`cupric._config`, `cupric._paths`, `cupric._cache`, `cupric._lazy`...) are the shared
  bottom layer and free to use. A package offers what others need under a public name
  (`cupric.runtime.native`, `cupric.runtime.resource`, ...).
* No module under cupric/ reads a private member of another package's classes (the
  names of `FOREIGN_MEMBERS`, which other packages used to read) as an attribute, in its
  code or in the source it generates. A package that defines a member of the same name
  for its own classes is free to use it (the check cannot tell the receivers apart), and
  so is a subclass's own code (``self``, ``cls``, ``super()``): the hooks and slots the
  public bases of `cupric.runtime.resource` document for their subclasses.
* No module under cupric/ is longer than `MAX_LINES`, except the generated code and
  declaration tables of `LONG_MODULES`.
"""

from __future__ import annotations

import ast
import pathlib
import re

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

#: Private members of the runtime's and the compiler's classes that other packages read
#: before issue 16, each with the public name that replaced it.
FOREIGN_MEMBERS: dict[str, dict[str, str]] = {
    "runtime": {
        "_alloc": "DeviceBuffer.allocation",
        "_make": "DeviceBuffer.view_of",
        "_check_open": "DeviceBuffer.check_open",
        "_stream": "DeviceBuffer.ordering_stream (or the checked `stream`)",
        "_base": "DeviceBuffer.view_base (or the property `base`)",
        "_closed": "Resource.closed (an allocation's too)",
        "_ptr": "DeviceResource.ptr, a library handle's ptr",
        "_stream_ptr": "StreamBoundHandle.stream",
        "_multi": "StreamBoundHandle.multi_device",
        "_owned": "StreamBoundHandle.owned",
        "_finalizer": "Resource.owns_handle",
        "_dl_device_type": "issubclass(cls, ManagedBuffer)",
    },
    "compiler": {
        "_fast": "compiler.launcher.launch_now / attempt",
        "_launch": "compiler.launcher.launch_now",
        "_cupric_device_function": "isinstance(obj, cupric.compiler.DeviceFunction)",
    },
}

#: Reads of `FOREIGN_MEMBERS` still in the tree: (module, line text), with the reason.
#: None today.
KNOWN_MEMBER_READS: set[tuple[str, str]] = set()


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


def own_members(package: str) -> set[str]:
    """The member names a subpackage defines for its own classes (methods, class
    attributes, ``__slots__`` entries, attributes set in ``__init__``), and the names of
    its own modules and of their globals."""
    names = set()
    for path in (ROOT / package).rglob("*.py"):
        names.add(path.stem)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(item.name)
                    if item.name == "__init__":
                        names.update(n.attr for n in ast.walk(item)
                                     if isinstance(n, ast.Attribute)
                                     and isinstance(n.ctx, ast.Store)
                                     and isinstance(n.value, ast.Name)
                                     and n.value.id == "self")
                elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                    targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                    for target in targets:
                        if isinstance(target, ast.Name):
                            names.add(target.id)
                            if target.id == "__slots__":
                                names.update(c.value for c in ast.walk(item.value)
                                             if isinstance(c, ast.Constant)
                                             and isinstance(c.value, str))
    return names


def member_reads(path: pathlib.Path, forbidden: dict[str, str]) -> list[tuple[int, str]]:
    """``(line, what)`` for every read of a `forbidden` member name in the module: as an
    attribute of anything but ``self``, ``cls`` or ``super()``, or as ``.name`` in a
    string (the source of generated code)."""
    found: list[tuple[int, str]] = []
    in_text = re.compile(r"\.(%s)\b" % "|".join(map(re.escape, sorted(forbidden))))
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in forbidden:
            receiver = node.value
            if isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
                continue
            if (isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name)
                    and receiver.func.id == "super"):
                continue
            found.append((node.lineno, f"{ast.unparse(receiver)}.{node.attr} "
                                       f"(use {forbidden[node.attr]})"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for match in in_text.finditer(node.value):
                found.append((node.lineno, f"{match.group(0)!r} in a string "
                                           f"(use {forbidden[match.group(1)]})"))
    return found


def test_no_module_reads_another_packages_private_members():
    problems = []
    packages = sorted(p.name for p in ROOT.iterdir()
                      if p.is_dir() and (p / "__init__.py").is_file())
    for owner, members in FOREIGN_MEMBERS.items():
        for package in packages:
            if package == owner:
                continue
            forbidden = {name: public for name, public in members.items()
                         if name not in own_members(package)}
            for path in sorted((ROOT / package).rglob("*.py")):
                for line, what in member_reads(path, forbidden):
                    text = path.read_text(encoding="utf-8").splitlines()[line - 1].strip()
                    if (str(path.relative_to(ROOT.parent)), text) not in KNOWN_MEMBER_READS:
                        problems.append(f"{path.relative_to(ROOT.parent)}:{line}: {what}")
    assert not problems, (f"private members of another package's classes:\n"
                          + "\n".join(problems))


def test_the_member_check_sees_a_read(tmp_path):
    """The member scanner: reads through any receiver and in generated source are
    caught; a subclass's own ``self``/``cls``/``super()`` code is not."""
    source = tmp_path / "probe.py"
    source.write_text("def f(buf, h, s):\n"
                      "    if buf._alloc._closed: return h._stream_ptr\n"
                      "    code = f'if {s}._alloc._closed: slow()'\n"
                      "class H:\n"
                      "    def g(self):\n"
                      "        return self._closed or super()._closed\n")
    forbidden = {"_alloc": "allocation", "_closed": "closed", "_stream_ptr": "stream"}
    found = [what.split(" ")[0] for _, what in member_reads(source, forbidden)]
    assert sorted(found) == sorted(["buf._alloc", "buf._alloc._closed", "h._stream_ptr",
                                    "'._alloc'", "'._closed'"])
    assert {"_alloc", "_make", "_closed", "_stream_ptr"} <= own_members("runtime")
    assert "_alloc" not in own_members("kernels")


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

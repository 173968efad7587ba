"""Lazy package attributes: names resolved from a submodule on first access.

Packages whose public names live in heavier submodules (the library wrappers) use this so
that importing the package stays cheap and loads no shared library.
"""

from __future__ import annotations

import importlib
import sys
import types


def attach(package: str, package_globals: dict, names: dict[str, tuple[str, str | None]]):
    """Return `(__getattr__, __dir__)` for `package` resolving `names` lazily.

    `names` maps a public name to `(module, attribute)`; attribute None means the module
    itself. A resolved value is cached in the package's globals.

    A public name that is also a submodule's name (``cupric.cudnn.softmax`` the function
    and ``cupric/cudnn/softmax.py``) stays the public object: importing a submodule binds
    it on its package with ``setattr``, which the package's class declines for such
    names, so whichever is imported first the package attribute is the function (the
    submodule stays reachable through ``sys.modules`` and relative imports).
    """
    public = frozenset(name for name, (_, attribute) in names.items() if attribute is not None)
    module = sys.modules[package]
    if type(module) is types.ModuleType:
        module.__class__ = _public_names_win(public)

    def __getattr__(name: str):
        try:
            module_name, attribute = names[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        module = importlib.import_module(module_name)
        value = module if attribute is None else getattr(module, attribute)
        package_globals[name] = value
        return value

    def __dir__():
        return sorted(set(package_globals) | set(names))

    return __getattr__, __dir__


def _public_names_win(public: frozenset[str]) -> type:
    """A module class whose `setattr` keeps `public` names from being bound to submodules."""

    class _Package(types.ModuleType):
        def __setattr__(self, name, value):
            if (name in public and isinstance(value, types.ModuleType)
                    and value.__name__ == f"{self.__name__}.{name}"):
                return
            super().__setattr__(name, value)

    return _Package

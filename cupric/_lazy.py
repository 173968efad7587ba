"""Lazy package attributes: names resolved from a submodule on first access.

Packages whose public names live in heavier submodules (the library wrappers) use this so
that importing the package stays cheap and loads no shared library.
"""

from __future__ import annotations

import importlib


def attach(package: str, package_globals: dict, names: dict[str, tuple[str, str | None]]):
    """Return `(__getattr__, __dir__)` for `package` resolving `names` lazily.

    `names` maps a public name to `(module, attribute)`; attribute None means the module
    itself. A resolved value is cached in the package's globals.
    """

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

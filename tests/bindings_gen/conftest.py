"""Fixtures of the bindings generator tests: one private bindings cache per session, and
every wheel library generated once into it (generation is the slow part)."""

from __future__ import annotations

import os
import time

import pytest

from cupric.bindings_gen import cache, libraries
from cupric.bindings_gen.errors import HeadersNotFoundError, PreprocessorNotFoundError

from bindings_helpers import WHEEL_LIBRARIES


@pytest.fixture(scope="session", autouse=True)
def bindings_dir(tmp_path_factory):
    """Point the generator's cache at a fresh directory for the whole session."""
    path = tmp_path_factory.mktemp("bindings")
    old = os.environ.get("CUPRIC_BINDINGS_DIR")
    os.environ["CUPRIC_BINDINGS_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("CUPRIC_BINDINGS_DIR", None)
    else:
        os.environ["CUPRIC_BINDINGS_DIR"] = old


class Generated:
    """What the session generated: module paths, generation results, total seconds."""

    def __init__(self):
        self.paths: dict[str, str] = {}
        self.results = {}
        self.missing: dict[str, str] = {}
        self.seconds = 0.0

    def require(self, name: str):
        """The GeneratedModule of `name`, or a skip when its headers are not installed."""
        if name in self.missing:
            pytest.skip(self.missing[name])
        return self.results[name]


@pytest.fixture(scope="session")
def generated(bindings_dir) -> Generated:
    out = Generated()
    start = time.perf_counter()
    results = cache.ensure_many([libraries.get(n) for n in WHEEL_LIBRARIES], force=True)
    out.seconds = time.perf_counter() - start
    for name, (value, error) in results.items():
        if isinstance(error, HeadersNotFoundError):
            out.missing[name] = f"headers not installed: {error}"
            continue
        if isinstance(error, PreprocessorNotFoundError):
            out.missing[name] = f"no C preprocessor: {error}"
            continue
        if error is not None:
            raise error
        out.paths[name], out.results[name] = value
    return out

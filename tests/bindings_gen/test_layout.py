"""Struct sizes, alignments and field offsets: cffi's view of the generated module
against the C compiler compiling the real headers."""

from __future__ import annotations

import pytest

from cupric.bindings_gen import cache, libraries
from cupric.bindings_gen.headers import find_headers

from bindings_helpers import WHEEL_LIBRARIES, c_layouts, cffi_layouts, compiler

CC = compiler()
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler (gcc, cc, clang) on PATH")


@pytest.mark.parametrize("name", WHEEL_LIBRARIES)
def test_struct_layouts_match_the_c_compiler(generated, name, tmp_path):
    generated.require(name)
    header_set = find_headers(libraries.get(name))
    module = cache.import_module(generated.paths[name], name)
    ours = cffi_layouts(module.ffi)
    theirs = c_layouts(CC, list(header_set.include_dirs), header_set.top_header, ours, str(tmp_path))
    # cuRAND's structs are all opaque; the others have a dozen or so each.
    assert ours or name == "curand"
    mismatches = {k: (ours[k], theirs[k]) for k in ours if ours[k] != theirs[k]}
    assert not mismatches, mismatches


def test_aligned_vector_types_keep_their_alignment(generated):
    generated.require("cublas")
    module = cache.import_module(generated.paths["cublas"], "cublas")
    ffi = module.ffi
    assert (ffi.sizeof("cuComplex"), ffi.alignof("cuComplex")) == (8, 8)
    assert (ffi.sizeof("cuDoubleComplex"), ffi.alignof("cuDoubleComplex")) == (16, 16)
    value = ffi.new("cuComplex *", {"x": 1.5, "y": -2.0})
    assert (value.x, value.y) == (1.5, -2.0)

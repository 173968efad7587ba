"""Preprocessor backends and their fallback order; attribute stripping."""

from __future__ import annotations

import importlib.util

import pytest

from cupric.bindings_gen import libraries, preprocess
from cupric.bindings_gen.attributes import strip_attributes
from cupric.bindings_gen.errors import PreprocessorNotFoundError
from cupric.bindings_gen.headers import find_headers


HAVE_PCPP = importlib.util.find_spec("pcpp") is not None
needs_pcpp = pytest.mark.skipif(not HAVE_PCPP, reason="pcpp is not installed (pip install pcpp)")


@pytest.fixture()
def curand_headers(generated):
    generated.require("curand")
    return find_headers(libraries.get("curand"))


@needs_pcpp
def test_default_is_pcpp(curand_headers, monkeypatch):
    monkeypatch.delenv("CUPRIC_CPP", raising=False)
    assert preprocess.preprocess(curand_headers).backend == "pcpp"


def test_falls_back_to_a_c_preprocessor_without_pcpp(curand_headers, monkeypatch):
    if preprocess._find_cpp() is None:
        pytest.skip("no C preprocessor on PATH")
    monkeypatch.delenv("CUPRIC_CPP", raising=False)

    def no_pcpp(header_set, libc_dir):
        raise PreprocessorNotFoundError("pcpp is not installed")

    monkeypatch.setattr(preprocess, "_run_pcpp", no_pcpp)
    unit = preprocess.preprocess(curand_headers)
    assert unit.backend != "pcpp"
    assert any(m.name == "CURAND_VER_MAJOR" and m.header == "curand.h" for m in unit.macros)


def test_neither_backend_says_to_install_pcpp(curand_headers, monkeypatch):
    monkeypatch.delenv("CUPRIC_CPP", raising=False)

    def no_pcpp(header_set, libc_dir):
        raise PreprocessorNotFoundError("pcpp is not installed")

    monkeypatch.setattr(preprocess, "_run_pcpp", no_pcpp)
    monkeypatch.setattr(preprocess, "_find_cpp", lambda: None)
    with pytest.raises(PreprocessorNotFoundError, match="pip install pcpp"):
        preprocess.preprocess(curand_headers)


@needs_pcpp
def test_environment_variable_picks_the_backend(curand_headers, monkeypatch):
    monkeypatch.setenv("CUPRIC_CPP", "pcpp")
    assert preprocess.preprocess(curand_headers).backend == "pcpp"


def test_line_markers_are_relative_labels(curand_headers):
    unit = preprocess.preprocess(curand_headers)
    assert '"curand.h"' in unit.text
    assert "site-packages" not in unit.text  # no machine paths: output is portable


def test_attributes_are_stripped_and_alignment_kept():
    text = ('struct __attribute__((aligned(8))) float2 { float x; float y; };\n'
            'int f(void) __attribute__((deprecated("use g() (instead)")));\n')
    stripped, alignments = strip_attributes(text)
    assert "__attribute__" not in stripped
    assert alignments == {"float2": "8"}
    assert stripped.count("\n") == text.count("\n")

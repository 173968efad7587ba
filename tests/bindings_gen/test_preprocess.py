"""Preprocessor backends and their fallback order; attribute stripping."""

from __future__ import annotations

import importlib.util

import pytest

from cupric.bindings_gen import libraries, preprocess
from cupric.bindings_gen.attributes import strip_attributes
from cupric.bindings_gen.errors import BindingsError, PreprocessorNotFoundError
from cupric.bindings_gen.headers import find_headers


HAVE_PCPP = importlib.util.find_spec("pcpp") is not None
needs_pcpp = pytest.mark.skipif(not HAVE_PCPP, reason="pcpp is not installed (pip install pcpp)")


@pytest.fixture()
def curand_headers(generated):
    generated.require("curand")
    return find_headers(libraries.get("curand"))


def test_default_is_the_c_preprocessor_on_path(curand_headers, monkeypatch):
    if preprocess._find_cpp() is None:
        pytest.skip("no C preprocessor on PATH")
    monkeypatch.delenv("CUPRIC_CPP", raising=False)
    unit = preprocess.preprocess(curand_headers)
    assert unit.backend == " ".join(preprocess._find_cpp())
    assert any(m.name == "CURAND_VER_MAJOR" and m.header == "curand.h" for m in unit.macros)


@needs_pcpp
def test_falls_back_to_pcpp_without_a_c_preprocessor(curand_headers, monkeypatch):
    monkeypatch.delenv("CUPRIC_CPP", raising=False)
    monkeypatch.setattr(preprocess, "_find_cpp", lambda: None)
    assert preprocess.preprocess(curand_headers).backend == "pcpp"


def test_a_failing_c_preprocessor_names_the_way_around(curand_headers, monkeypatch):
    monkeypatch.delenv("CUPRIC_CPP", raising=False)
    monkeypatch.setattr(preprocess, "_find_cpp", lambda: ["false"])
    with pytest.raises(BindingsError, match="CUPRIC_CPP=pcpp"):
        preprocess.preprocess(curand_headers)


@needs_pcpp
@pytest.mark.parametrize("name", ["curand", "cublas", "cudnn"])
def test_both_backends_give_the_same_module(generated, name):
    """The C preprocessor and pcpp see the same fake libc and macros: same module, byte
    for byte (what lets the faster one be the default)."""
    if preprocess._find_cpp() is None:
        pytest.skip("no C preprocessor on PATH")
    from cupric.bindings_gen.generate import generate
    generated.require(name)
    spec = libraries.get(name)
    headers = find_headers(spec)
    by_cpp = generate(spec, header_set=headers, backend=" ".join(preprocess._find_cpp()))
    by_pcpp = generate(spec, header_set=headers, backend="pcpp")
    assert by_cpp.text == by_pcpp.text


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

"""Kernel bundles (`python -m cupric compile --fatbin`): CPU lane: the bundle holds a cubin
per architecture and PTX, with a manifest; a registered bundle answers a kernel's compile
before libNVVM is asked (a compiler made to fail proves it); the variant for a newer GPU
of the same major version is the older cubin, for a newer major version the PTX; a
missing variant with no compiler names the arch and the signature; editing the kernel's
source or a module constant it reads makes the bundle miss. GPU lane: a kernel launched
from the bundle alone (no compiler reachable) computes the right result."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest

from cupric.compiler import backend, bundle
from cupric.compiler.errors import ToolchainNotFoundError

SIG = "f32, Array[f32, 1, 'C'], Array[f32, 1, 'C']"

SOURCE = textwrap.dedent('''
    import cupric
    from cupric.device import grid
    from cupric.types import Array, f32

    OFFSET = 1.0

    @cupric.kernel
    def shifted_axpy(a: f32, x: Array[f32, 1, 'C'], y: Array[f32, 1, 'C']):
        i = grid(1)
        if i < len(y):
            y[i] = a * x[i] + y[i] + OFFSET
''')


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bundle")
    source = folder / "kernels_src.py"
    source.write_text(SOURCE)
    target = folder / "kernels.cubundle"
    proc = subprocess.run([sys.executable, "-m", "cupric", "compile", "--fatbin", "--arch",
                           "sm_80,sm_90", f"{source}::shifted_axpy", "--signature", SIG,
                           "-o", str(target)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "4 variants of shifted_axpy for sm_80, sm_90 (+ PTX for sm_80)" in proc.stdout
    return folder, source, target


@pytest.fixture
def no_compiler(monkeypatch):
    """Compiling is impossible (and the kernel cache is empty): only a bundle helps."""
    def refuse(*args, **kwargs):
        raise ToolchainNotFoundError("libNVVM is not installed (test)")
    monkeypatch.setattr(backend, "build", refuse)
    monkeypatch.setattr(backend, "lookup", lambda *a, **k: None)


@pytest.fixture
def registered(built):
    handle = bundle.register_bundle(built[2])
    yield handle
    bundle.unregister_bundle(handle)


def test_the_bundle_holds_cubins_ptx_and_a_manifest(built):
    with zipfile.ZipFile(built[2]) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        names = zf.namelist()
        entry = manifest["entries"][0]
        assert zf.read(entry["cubins"]["sm_90"])[:4] == b"\x7fELF"
        assert ".target sm_80" in zf.read(entry["ptx"]).decode()
    assert manifest["archs"] == ["sm_80", "sm_90"] and manifest["format"] == 1
    assert sorted((e["noalias"], e["aligned"]) for e in manifest["entries"]) == \
        [(False, False), (False, True), (True, False), (True, True)]
    assert sum(n.endswith(".cubin") for n in names) == 8
    assert {e["signature"] for e in manifest["entries"]} == \
        {"(f32, Array[f32, 1, 'C'], Array[f32, 1, 'C'])"}


def test_a_registered_bundle_answers_before_the_compiler(built, registered, no_compiler):
    kern = load(built[1], "bundle_kernels_a").shifted_axpy
    art = kern.compile(SIG, arch="sm_90")
    assert art.linker == "bundle" and art.arch == "sm_90" and art.cubin[:4] == b"\x7fELF"
    assert art.image("sm_90")[0] == "cubin"
    # sm_86 runs sm_80's SASS; sm_100 gets the PTX (the driver compiles it).
    assert kern.compile(SIG, arch="sm_86").arch == "sm_80"
    newer = kern.compile(SIG, arch="sm_100")
    assert newer.cubin is None and ".target sm_80" in newer.ptx


def test_a_missing_variant_without_a_compiler_names_arch_and_signature(built, registered,
                                                                       no_compiler):
    from cupric.compiler.kernel import Kernel
    kern = load(built[1], "bundle_kernels_b").shifted_axpy
    fast = Kernel(kern.py_func, fast_math=True)  # built with other options: no variant
    with pytest.raises(bundle.BundleMissError) as info:
        fast.compile(SIG, arch="sm_90")
    message = str(info.value)
    assert "kernel shifted_axpy: no registered bundle holds its variant for arch sm_90" in message
    assert "signature (f32, Array[f32, 1, 'C'], Array[f32, 1, 'C'])" in message
    assert "ftz=1" in message and "libNVVM is not installed" in message
    assert "shifted_axpy((f32, Array[f32, 1, 'C'], Array[f32, 1, 'C'])) for sm_80, sm_90" \
        in message
    with pytest.raises(bundle.BundleMissError, match="arch sm_75"):
        kern.compile(SIG, arch="sm_75")  # older than every cubin and the PTX


def test_edited_source_or_constants_miss(built, registered, no_compiler, tmp_path):
    changed = tmp_path / "kernels_changed.py"
    changed.write_text(SOURCE.replace("OFFSET = 1.0", "OFFSET = 2.0"))
    kern = load(changed, "bundle_kernels_c").shifted_axpy
    with pytest.raises(bundle.BundleMissError, match="other source code"):
        kern.compile(SIG, arch="sm_90")


def test_without_a_bundle_the_toolchain_error_is_unchanged(no_compiler, built):
    kern = load(built[1], "bundle_kernels_d").shifted_axpy
    with pytest.raises(ToolchainNotFoundError, match="test"):
        kern.compile(SIG, arch="sm_90")


def test_not_a_bundle(tmp_path):
    bad = tmp_path / "x.cubundle"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("hello.txt", "hi")
    with pytest.raises(ValueError, match="not a cupric kernel bundle"):
        bundle.register_bundle(bad)


@pytest.mark.gpu
def test_a_kernel_runs_from_the_bundle_alone(built, registered, no_compiler, rng):
    from cupric import runtime as rt
    kern = load(built[1], "bundle_kernels_gpu").shifted_axpy
    n = 100_003
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    dx, dy = rt.to_device(x), rt.to_device(y)
    kern[(n + 255) // 256, 256](np.float32(1.5), dx, dy)
    np.testing.assert_allclose(dy.to_numpy(), 1.5 * x + y + 1.0, rtol=1e-5, atol=1e-5)
    assert kern.compile(SIG).linker == "bundle"

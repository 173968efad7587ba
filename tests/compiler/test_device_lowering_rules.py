"""CPU lane: the lowering tables cover every intrinsic `cupric.device` declares, and
each family picks the intended NVVM form (libdevice precision, scoped atomics through
inline PTX, redux.sync only where the target has it)."""

from __future__ import annotations

import re

import pytest

import cupric
import cupric.device.math as dmath
from cupric.device import REGISTRY, FULL_MASK, atomic, grid, warp
from cupric.compiler.lowering.registry import rule_for


def test_every_declared_intrinsic_has_a_lowering_rule():
    missing = sorted(name for name in REGISTRY if rule_for(name) is None)
    assert not missing, f"no compiler lowering for: {missing}"


_ARITY = {"atan2": 2, "pow": 2, "hypot": 2, "fmod": 2, "remainder": 2, "copysign": 2,
          "nextafter": 2, "fmin": 2, "fmax": 2, "fdim": 2, "fma": 3, "ldexp": "x,n",
          "scalbn": "x,n", "rhypot": 2, "norm3d": 3, "rnorm3d": 3, "norm4d": 4,
          "rnorm4d": 4, "jn": "n,x", "yn": "n,x", "sincos": "tuple", "sincospi": "tuple",
          "modf": "tuple", "frexp": "tuple"}
_RESULT = {"ilogb": "i32", "isnan": "bool", "isinf": "bool", "isfinite": "bool",
           "signbit": "bool"}


def _math_kernel(func, arity):
    """A kernel applying `func` to array elements (one body per argument pattern: the
    typer types every statement, so each pattern needs its own function)."""
    if arity == 1:
        def body(x, out):
            out[grid(1)] = func(x[grid(1)])
    elif arity == "tuple":
        def body(x, out):
            out[grid(1)] = func(x[grid(1)])[0]
    elif arity == 2:
        def body(x, out):
            out[grid(1)] = func(x[grid(1)], x[0])
    elif arity == 3:
        def body(x, out):
            out[grid(1)] = func(x[grid(1)], x[0], x[1])
    elif arity == 4:
        def body(x, out):
            out[grid(1)] = func(x[grid(1)], x[0], x[1], x[2])
    elif arity == "x,n":
        def body(x, out):
            out[grid(1)] = func(x[grid(1)], 3)
    else:
        def body(x, out):
            out[grid(1)] = func(2, x[grid(1)])
    return cupric.kernel(body)


@pytest.mark.parametrize("name", sorted(n[5:] for n in REGISTRY if n.startswith("math.")))
def test_math_follows_the_argument_precision(name):
    """Every math intrinsic compiles for f32 and f64 arguments and calls the libdevice
    function of that precision (f32: the `...f` one)."""
    func = getattr(dmath, name)
    calls = {}
    for t in ("f32", "f64"):
        kern = _math_kernel(func, _ARITY.get(name, 1))
        ir = kern.inspect_ir(f"Array[{t}, 1, 'C'], Array[{_RESULT.get(name, t)}, 1, 'C']")
        calls[t] = set(re.findall(r"call \S+ @(__nv_\w+)", ir))
    if name in ("degrees", "radians"):
        assert not calls["f32"] and not calls["f64"]  # a multiplication
        return
    assert calls["f32"] and all(c.endswith("f") for c in calls["f32"]), calls
    if name != "saturate":  # libdevice has no double saturate: a clamp in plain IR
        assert calls["f64"] and not calls["f32"] & calls["f64"], calls


def test_scoped_atomics_and_the_default_form():
    @cupric.kernel
    def scoped(x):
        x[4] = atomic.add(x, 0, 1)  # the old value is used: atom, not red
        atomic.add(x, 1, 1, scope="block")
        atomic.add(x, 2, 1, scope="system", order="release")
        atomic.cas(x, 3, 0, 1, scope="block", order="acquire")

    ir = scoped.inspect_ir("Array[i32, 1, 'C']")
    assert "atomicrmw add i32 addrspace(1)*" in ir and "monotonic" in ir
    ptx = scoped.inspect_ptx("Array[i32, 1, 'C']", arch="sm_80")
    for want in (r"atom\.global\.add\.u32", r"red\.cta\.global\.add\.u32",
                 r"red\.release\.sys\.global\.add\.u32", r"atom\.acquire\.cta\.cas\.b32"):
        assert re.search(want, ptx), want


def test_redux_only_where_the_target_has_it():
    @cupric.kernel
    def total(x, out):
        out[grid(1)] = warp.reduce_add(FULL_MASK, x[grid(1)])

    sig = "Array[i32, 1, 'C'], Array[i32, 1, 'C']"
    assert "__nvvm_reflect" in total.inspect_ir(sig)
    assert "redux.sync.add" in total.inspect_ptx(sig, arch="sm_80")
    old = total.inspect_ptx(sig, arch="sm_75")
    assert "redux.sync" not in old and "shfl.sync.bfly" in old


def test_bf16x2_atomics_fall_back_to_cas_before_sm90():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    import device_lowering_kernels as dk

    sig = "Array[f16, 1, 'C'], Array[u16, 1, 'C'], Array[f32, 1, 'C'], Array[f32, 1, 'C']"
    old = dk.half_atomics.inspect_ptx(sig, arch="sm_80")
    assert "bf16x2" not in old and re.search(r"atom\.global\.cas\.b32", old)
    assert "atom.add.noftz.bf16x2" in dk.half_atomics.inspect_ptx(sig, arch="sm_90")

"""CompileOptions: validation, the flag tables and the cache key."""

from __future__ import annotations

import dataclasses

import pytest

from cupric.compiler.options import DEFAULT_ARCH, CompileOptions, arch_number, normalize_arch


@pytest.mark.parametrize("given, canonical", [
    ("sm_90", "sm_90"), ("compute_90", "sm_90"), ("90", "sm_90"), (90, "sm_90"),
    ("9.0", "sm_90"), ("SM_90A", "sm_90a"), ("compute_100f", "sm_100f"), ("12.0", "sm_120"),
    (" sm_80 ", "sm_80"),
])
def test_arch_spellings(given, canonical):
    assert normalize_arch(given) == canonical
    assert CompileOptions(arch=given).arch == canonical


@pytest.mark.parametrize("bad", ["sm90", "sm_9", "gfx90a", "", 35, "3.5", True, 9.0, None])
def test_bad_arch(bad):
    with pytest.raises(ValueError):
        normalize_arch(bad)


def test_arch_number():
    assert arch_number("sm_90a") == 90 and arch_number("sm_120") == 120


@pytest.mark.parametrize("field, value, error", [
    ("opt_level", 4, ValueError), ("opt_level", -1, ValueError), ("opt_level", "3", TypeError),
    ("opt_level", True, TypeError), ("debug", 1, TypeError), ("ftz", "yes", TypeError),
    ("max_registers", 8, ValueError), ("max_registers", 300, ValueError),
    ("max_registers", 32.0, TypeError), ("fast_math", None, TypeError),
])
def test_validation(field, value, error):
    with pytest.raises(error, match=field):
        CompileOptions(**{field: value})


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        CompileOptions().opt_level = 1


def test_defaults_are_ieee():
    options = CompileOptions(arch="sm_90")
    assert (options.ftz, options.prec_div, options.prec_sqrt, options.fma) == (False, True, True, True)
    assert options.nvvm_flags() == ["-arch=compute_90", "-opt=3", "-ftz=0", "-prec-div=1",
                                    "-prec-sqrt=1", "-fma=1"]


def test_fast_math_and_explicit_overrides():
    fast = CompileOptions(arch="sm_90", fast_math=True)
    assert (fast.ftz, fast.prec_div, fast.prec_sqrt, fast.fma) == (True, False, False, True)
    mixed = CompileOptions(arch="sm_90", fast_math=True, prec_div=True)
    assert mixed.prec_div is True and mixed.ftz is True
    # Same switches, same cache key, however they were asked for.
    spelled = CompileOptions(arch="sm_90", ftz=True, prec_div=False, prec_sqrt=False)
    assert fast.cache_key() == spelled.cache_key()
    assert fast.cache_key() != CompileOptions(arch="sm_90").cache_key()


def test_flag_tables():
    options = CompileOptions(arch="sm_80", opt_level=2, lineinfo=True, max_registers=64)
    assert "-generate-line-info" in options.nvvm_flags()
    assert "-maxreg=64" in options.nvvm_flags()
    # nvJitLink itself takes -O0/-O3 only: other levels reach its ptxas pass.
    assert options.nvjitlink_flags() == ["-arch=sm_80", "-Xptxas=-O2", "-verbose", "-lineinfo",
                                         "-maxrregcount=64"]
    assert options.ptxas_flags() == ["-arch=sm_80", "-O2", "-v", "-lineinfo", "--maxrregcount=64"]
    debug = CompileOptions(arch="sm_80", debug=True, lineinfo=True)
    assert "-g" in debug.nvvm_flags() and "-generate-line-info" not in debug.nvvm_flags()
    # The assemblers refuse -g with optimization: debug means -O0 there.
    assert "-O0" in debug.ptxas_flags() and "-g" in debug.ptxas_flags()
    assert "-O0" in debug.nvjitlink_flags() and "-g" in debug.nvjitlink_flags()


def test_flags_need_an_arch():
    with pytest.raises(ValueError, match="resolve"):
        CompileOptions().nvvm_flags()


def test_resolve(monkeypatch):
    from cupric.compiler import target

    assert CompileOptions(arch="sm_80").resolve().arch == "sm_80"
    assert CompileOptions(arch="sm_80").resolve("sm_90").arch == "sm_90"
    monkeypatch.setattr(target, "current_arch", lambda: None)
    assert CompileOptions().resolve().arch == DEFAULT_ARCH
    monkeypatch.setattr(target, "current_arch", lambda: "sm_86")
    assert CompileOptions().resolve().arch == "sm_86"


def test_cache_key_is_stable_text():
    key = CompileOptions(arch="sm_90").cache_key()
    assert key == ("arch=sm_90;opt=3;debug=0;lineinfo=0;ftz=0;prec_div=1;prec_sqrt=1;fma=1;"
                   "maxreg=0")
    assert CompileOptions().cache_key().startswith("arch=auto;")
    assert len({CompileOptions(arch="sm_90", opt_level=n).cache_key() for n in range(4)}) == 4


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_every_opt_level_links_through_nvjitlink(level):
    from _backend_samples import exp_kernel
    from cupric.compiler import backend

    artifact = backend.build(exp_kernel(), options=CompileOptions(arch="sm_90", opt_level=level),
                             cache=False, linker="nvjitlink", want=("cubin",))
    assert artifact.linker == "nvjitlink" and artifact.cubin

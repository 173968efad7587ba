"""Constant-memory placement at its edges: exactly 64 KiB and one byte more, the warning
threshold, which unmarked arrays spill (largest first, and only as many as needed), arrays
reached through device functions, and the bytes each global is initialized with.

Placement is visible in the LLVM IR: a module-level array lives in a global of address
space 4 (constant bank) or 1 (global memory, read through the non-coherent cache).
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import cupric
from cupric.compiler import CompileError
from cupric.compiler.lowering.const import ConstantMemoryWarning
from cupric.device import CONSTANT_MEMORY_BYTES, constant, grid

KIB64 = CONSTANT_MEMORY_BYTES
assert KIB64 == 65536
F64 = "Array[f64, 1, 'C']"
_GLOBAL = re.compile(r"^@cupric_const_(\w+) = internal addrspace\((\d)\) constant "
                     r"\[(\d+) x (i\d+)\] \[(.*)\], align (\d+)$", re.M)


def placement(kernel, sig=F64):
    """name -> (address space, element type, count, values, alignment), and the warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ir = kernel.inspect_ir(sig)
    found = {}
    for name, space, count, elem, init, align in _GLOBAL.findall(ir):
        values = [int(v.split()[1]) for v in init.split(", ")]
        assert len(values) == int(count)
        found[name] = (int(space), elem, int(count), values, int(align))
    messages = [str(w.message) for w in caught if issubclass(w.category, ConstantMemoryWarning)]
    return found, messages


def spaces(found):
    return {name: v[0] for name, v in found.items()}


def spilled(kernel: str, names: str) -> str:
    """The warning for arrays that spilled to global memory."""
    return (f"kernel {kernel}: module-level arrays {names} do not fit in the 65536-byte "
            f"constant bank and are read from global memory")


def near(kernel: str, total: int) -> str:
    """The warning for a bank filled past the warning threshold."""
    return f"kernel {kernel}: {total} bytes of constant data, near the 65536-byte constant bank"


# -- the marked limit -----------------------------------------------------------------------

FULL_MARKED = constant(np.zeros(KIB64 // 8))           # exactly 64 KiB
ONE_BYTE = constant(np.ones(1, np.uint8))
OTHER_FULL = constant(np.zeros(KIB64, np.uint8))       # exactly 64 KiB


def test_constant_accepts_exactly_the_bank_and_refuses_one_byte_more():
    assert constant(np.zeros(KIB64, np.uint8)).nbytes == KIB64
    with pytest.raises(ValueError, match="constant array of 65537 bytes exceeds the 65536-byte"):
        constant(np.zeros(KIB64 + 1, np.uint8))


def test_marked_arrays_of_exactly_64_kib_fit():
    @cupric.kernel
    def full(x):
        i = grid(1)
        x[i] = FULL_MARKED[i]

    found, messages = placement(full)
    assert spaces(found) == {"FULL_MARKED": 4}
    assert found["FULL_MARKED"][2] == KIB64 // 8
    assert messages == [near("full", KIB64)]


def test_marked_arrays_one_byte_past_64_kib_are_a_compile_error():
    @cupric.kernel
    def over(x):
        i = grid(1)
        x[i] = FULL_MARKED[i] + ONE_BYTE[0]

    with pytest.raises(CompileError, match=r"arrays marked constant\(\) need 65537 bytes, past "
                                           r"the 65536-byte constant bank: FULL_MARKED "
                                           r"\(65536 bytes\), ONE_BYTE \(1 bytes\)"):
        over.inspect_ir(F64)


def test_marked_arrays_never_spill_even_when_an_unmarked_one_could():
    @cupric.kernel
    def both(x):
        i = grid(1)
        x[i] = FULL_MARKED[i] + PLAIN_SMALL[i % 10]

    found, messages = placement(both)
    assert spaces(found) == {"FULL_MARKED": 4, "PLAIN_SMALL": 1}
    assert messages == [spilled("both", "PLAIN_SMALL")]


# -- unmarked arrays: the limit and the order they spill in ---------------------------------

PLAIN_FULL = np.zeros(KIB64 // 4, np.float32)          # exactly 64 KiB
PLAIN_OVER = np.zeros(KIB64 + 1, np.uint8)             # 64 KiB + 1
PLAIN_SMALL = np.arange(10, dtype=np.float64)          # 80 bytes
A40 = np.zeros(40_000, np.uint8)
B30 = np.zeros(30_000, np.uint8)
C20 = np.zeros(20_000, np.uint8)
D10 = np.zeros(10_000, np.uint8)
M30 = constant(np.zeros(30_000, np.uint8))


def test_unmarked_arrays_of_exactly_64_kib_stay_in_the_constant_bank():
    @cupric.kernel
    def full(x):
        i = grid(1)
        x[i] = PLAIN_FULL[i]

    found, messages = placement(full)
    assert spaces(found) == {"PLAIN_FULL": 4}
    assert messages == [near("full", 65536)]


def test_an_unmarked_array_one_byte_past_64_kib_spills():
    @cupric.kernel
    def over(x):
        i = grid(1)
        x[i] = PLAIN_OVER[i]

    found, messages = placement(over)
    assert spaces(found) == {"PLAIN_OVER": 1}
    assert messages == [spilled("over", "PLAIN_OVER")]


def test_the_largest_unmarked_array_spills_first_and_only_as_many_as_needed():
    # 90 000 bytes: spilling A40 leaves 50 000, which fits; smallest-first would spill
    # D10, C20 and B30 instead and keep A40.
    @cupric.kernel
    def four(x):
        i = grid(1)
        x[i] = C20[i] + A40[i] + D10[i] + B30[i] - 0.0

    found, messages = placement(four)
    assert spaces(found) == {"C20": 4, "A40": 1, "D10": 4, "B30": 4}
    assert messages == [spilled("four", "A40")]


def test_several_spill_in_decreasing_size_around_a_marked_array():
    # 130 000 bytes with 30 000 marked: A40 and B30 spill (60 000 left), C20 and D10 stay.
    @cupric.kernel
    def five(x):
        i = grid(1)
        x[i] = D10[i] + M30[i] + B30[i] + C20[i] + A40[i]

    found, messages = placement(five)
    assert spaces(found) == {"D10": 4, "M30": 4, "B30": 1, "C20": 4, "A40": 1}
    assert messages == [spilled("five", "A40, B30")]


def test_spilling_stops_exactly_at_the_bank_size():
    # 40 000 + 30 000 + 25 536 = 95 536: spilling A40 leaves exactly 65 536, which fits.
    @cupric.kernel
    def exact(x):
        i = grid(1)
        x[i] = A40[i] + B30[i] + REST[i]

    found, messages = placement(exact)
    assert spaces(found) == {"A40": 1, "B30": 4, "REST": 4}
    assert messages == [spilled("exact", "A40")]


REST = np.zeros(KIB64 - 40_000, np.uint8)


# -- the warning threshold (90 % of the bank: 58 982.4 bytes) -------------------------------

BELOW_WARN = np.zeros(58_982, np.uint8)
AT_WARN = np.zeros(58_983, np.uint8)


def test_no_warning_up_to_ninety_percent_of_the_bank():
    @cupric.kernel
    def quiet(x):
        i = grid(1)
        x[i] = BELOW_WARN[i]

    found, messages = placement(quiet)
    assert spaces(found) == {"BELOW_WARN": 4}
    assert messages == []


def test_a_warning_one_byte_past_ninety_percent():
    @cupric.kernel
    def loud(x):
        i = grid(1)
        x[i] = AT_WARN[i]

    found, messages = placement(loud)
    assert spaces(found) == {"AT_WARN": 4}
    assert messages == [near("loud", 58983)]


# -- arrays reached through device functions ------------------------------------------------

@cupric.device_function
def _read_b30(i):
    return B30[i] + A40[i]


def test_arrays_named_in_device_functions_count_once_toward_the_bank():
    # A40 is named in the kernel and in the device function: 70 000 bytes in all, not
    # 110 000 (which would spill B30 too) and not 40 000 (which would spill nothing).
    @cupric.kernel
    def via_device(x):
        i = grid(1)
        x[i] = A40[i] + _read_b30(i)

    found, messages = placement(via_device)
    assert spaces(found) == {"A40": 1, "B30": 4}
    assert messages == [spilled("via_device", "A40")]


# -- what each global holds -----------------------------------------------------------------

FLAGS = np.array([True, False, True])
HALVES = np.array([-1, 2, -32768], np.int16)
SINGLES = np.array([1.0, -2.0], np.float32)
WORDS = np.array([2**63, 1], np.uint64)
GRID2D = np.arange(6, dtype=np.int32).reshape(2, 3)


def test_globals_hold_the_raw_bits_at_16_byte_alignment():
    @cupric.kernel
    def mixed(x):
        i = grid(1)
        if FLAGS[i % 3]:
            x[i] = HALVES[i % 3] + SINGLES[i % 2] + WORDS[i % 2] + GRID2D[1, i % 3]

    found, messages = placement(mixed)
    assert messages == []
    assert found["FLAGS"] == (4, "i8", 3, [1, 0, 1], 16)
    assert found["HALVES"] == (4, "i16", 3, [65535, 2, 32768], 16)
    assert found["SINGLES"] == (4, "i32", 2, [0x3F800000, 0xC0000000], 16)
    assert found["WORDS"] == (4, "i64", 2, [2**63, 1], 16)
    assert found["GRID2D"] == (4, "i32", 6, [0, 1, 2, 3, 4, 5], 16)


def test_fortran_ordered_arrays_are_stored_in_c_order():
    @cupric.kernel
    def fortran(x):
        i = grid(1)
        x[i] = F_ORDER[i % 2, i % 3]

    found, _ = placement(fortran)
    assert found["F_ORDER"][3] == [0, 1, 2, 3, 4, 5]


F_ORDER = np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3))


EMPTY = np.zeros(0, np.float32)
SCALAR0D = np.array(1.0)
WORDS_STR = np.array(["a", "b"])


@pytest.mark.parametrize("name, message", [
    ("EMPTY", "'EMPTY' is an empty or 0-d array"),
    ("SCALAR0D", "'SCALAR0D' is an empty or 0-d array"),
    ("WORDS_STR", "'WORDS_STR' is an array of <U1; module-level arrays in kernels must have "
                  "a numeric or bool dtype"),
])
def test_arrays_kernels_cannot_read_are_refused(name, message):
    source = {"EMPTY": refuse_empty, "SCALAR0D": refuse_0d, "WORDS_STR": refuse_str}[name]
    with pytest.raises(CompileError, match=re.escape(message)):
        source.inspect_ir(F64)


@cupric.kernel
def refuse_empty(x):
    x[0] = EMPTY[0]


@cupric.kernel
def refuse_0d(x):
    x[0] = SCALAR0D[0]


@cupric.kernel
def refuse_str(x):
    x[0] = WORDS_STR[0]


# -- policies at their boundaries -----------------------------------------------------------------

from cupric.device.const import ConstantPolicy, constant_policy, global_memory  # noqa: E402

G60 = global_memory(np.zeros(60_000, np.uint8))
FILL_35536 = np.zeros(KIB64 - 30_000, np.uint8)


def test_an_unmarked_array_that_exactly_fills_the_rest_of_the_bank_stays():
    # 30 000 marked + 35 536 unmarked = 65 536: fits; global_memory() data never counts.
    @cupric.kernel
    def exact_fill(x):
        i = grid(1)
        x[i] = M30[i] + FILL_35536[i] + G60[i]

    found, messages = placement(exact_fill)
    assert spaces(found) == {"M30": 4, "FILL_35536": 4, "G60": 1}
    assert messages == [near("exact_fill", 65536)]


def test_explicit_policy_keeps_unmarked_arrays_out_of_the_bank():
    @cupric.kernel
    @constant_policy(placement="explicit")
    def explicit(x):
        i = grid(1)
        x[i] = M30[i] + PLAIN_SMALL[i % 10] + G60[i]

    found, messages = placement(explicit)
    assert spaces(found) == {"M30": 4, "PLAIN_SMALL": 1, "G60": 1}
    assert messages == []
    report = explicit.inspect_constants(F64)
    reasons = {e.name: (e.space, e.reason) for e in report.entries}
    assert reasons == {"M30": ("constant", "marked constant()"),
                       "PLAIN_SMALL": ("global", "explicit-only policy"),
                       "G60": ("global", "marked global_memory()")}
    assert (report.constant_bytes, report.global_bytes) == (30_000, 60_080)


@pytest.mark.parametrize("low, high, total, warns", [
    (0.5, 0.75, 32_768, False),      # exactly low: not inside
    (0.5, 0.75, 32_769, True),
    (0.5, 0.75, 49_152, True),       # exactly high: inside
    (0.5, 0.75, 49_153, False),
    (0.0, 1.0, 1, True),
])
def test_the_warning_range_excludes_low_and_includes_high(low, high, total, warns):
    global SIZED
    SIZED = np.zeros(total, np.uint8)

    @cupric.kernel
    @constant_policy(warn_range=(low, high))
    def sized(x):
        i = grid(1)
        x[i] = SIZED[i]

    found, messages = placement(sized)
    assert spaces(found) == {"SIZED": 4}
    assert messages == ([near("sized", total)] if warns else [])


SIZED = np.zeros(1, np.uint8)


def test_large_first_packing_and_quiet_spills():
    @cupric.kernel
    @constant_policy(packing="large_first", spill_warning=False)
    def large(x):
        i = grid(1)
        x[i] = C20[i] + A40[i] + D10[i] + B30[i] - 0.0

    found, messages = placement(large)
    # Offered 40 000, 30 000 (spills: 70 000), 20 000 (60 000), 10 000 (spills: 70 000).
    assert spaces(found) == {"A40": 4, "B30": 1, "C20": 4, "D10": 1}
    assert messages == []


def test_equal_sizes_spill_the_later_used_first_by_default():
    @cupric.kernel
    def ties(x):
        i = grid(1)
        x[i] = TIE_A[i] + TIE_B[i] + TIE_C[i]

    found, messages = placement(ties)
    # Smallest first with ties taken later-used first: TIE_C, TIE_B fit (60 000), TIE_A
    # does not.
    assert spaces(found) == {"TIE_A": 1, "TIE_B": 4, "TIE_C": 4}
    assert messages[0].startswith("kernel ties: module-level arrays TIE_A do not fit")


TIE_A = np.zeros(30_000, np.uint8)
TIE_B = np.zeros(30_000, np.uint8)
TIE_C = np.zeros(30_000, np.uint8)


@pytest.mark.parametrize("kw, match", [
    (dict(placement="manual"), "placement must be 'auto' or 'explicit', got 'manual'"),
    (dict(warn_range=(0.5,)), r"warn_range must be \(low, high\) fractions"),
    (dict(warn_range=(0.9, 0.8)), r"warn_range needs 0 <= low <= high, got \(0.9, 0.8\)"),
    (dict(warn_range=(-0.1, 0.5)), "warn_range needs 0 <= low <= high"),
    (dict(packing="biggest"), "packing must be one of small_first, large_first, by_module or "
                              "a function, got 'biggest'"),
])
def test_policies_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        ConstantPolicy(**kw)


def test_policy_edges_accepted():
    assert ConstantPolicy(warn_range=(0, 0)).warn_range == (0.0, 0.0)
    assert ConstantPolicy(warn_range=(1, 1)).warn_range == (1.0, 1.0)
    assert ConstantPolicy(warn_range=None).warn_range is None


# -- what kernels see, and the placement report ---------------------------------------------------

def test_module_level_arrays_are_read_only_in_kernels():
    @cupric.kernel
    def writes(x):
        i = grid(1)
        PLAIN_SMALL[i] = x[i]

    with pytest.raises(CompileError):
        writes.inspect_ir(F64)


def test_the_ir_of_each_space_compiles_to_constant_and_global_loads():
    from cupric.compiler import backend
    from cupric.compiler.options import CompileOptions

    @cupric.kernel
    def two_spaces(x):
        i = grid(1)
        x[i] = PLAIN_SMALL[i % 10] + G60[i]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ir = two_spaces.specialize(F64).ir
    # No kernel cache: the IR this compiler made now is what libNVVM sees.
    ptx = backend.build(ir, options=CompileOptions(arch="sm_90"), cache=False).ptx
    assert re.search(r"ld\.const\.f64", ptx), ptx
    assert re.search(r"ld\.global\.nc\.u8|ld\.global\.nc\.b8", ptx), ptx
    assert ".const .align 16 .b8 cupric_const_PLAIN_SMALL[80]" in ptx
    assert ".global .align 16 .b8 cupric_const_G60[60000]" in ptx


def test_the_placement_report_says_what_went_where_and_why():
    @cupric.kernel
    def reported(x):
        i = grid(1)
        x[i] = C20[i] + A40[i] + M30[i] + G60[i]

    report = reported.inspect_constants(F64)
    module = reported.py_func.__module__
    assert report.kernel == "reported" and report.policy == ConstantPolicy()
    assert [(e.name, e.module, e.nbytes, e.space, e.reason) for e in report.entries] == [
        ("C20", module, 20_000, "constant", "automatic"),
        ("A40", module, 40_000, "global", "spilled"),
        ("M30", module, 30_000, "constant", "marked constant()"),
        ("G60", module, 60_000, "global", "marked global_memory()")]
    assert (report.constant_bytes, report.global_bytes, report.limit) == (50_000, 100_000,
                                                                          65536)
    assert report.warnings == (spilled("reported", "A40"),)
    d = report.as_dict()
    assert d["kernel"] == "reported" and d["limit"] == 65536
    assert (d["constant_bytes"], d["global_bytes"]) == (50_000, 100_000)
    assert d["policy"] == ConstantPolicy().cache_key() and d["warnings"] == list(report.warnings)
    assert d["arrays"][1] == {"name": "A40", "module": module, "nbytes": 40_000,
                              "space": "global", "reason": "spilled"}
    text = str(report).splitlines()
    assert text[0] == ("kernel reported: 50000 of 65536 constant bytes (76.3 %), 100000 bytes "
                       "of module data in global memory")
    w = len(module)
    assert text[1] == f"  array  {'module':<{w}}     bytes  space     why"
    assert text[2] == f"  C20  {module:<{w}}     20000  constant  automatic"
    assert text[5] == f"  G60  {module:<{w}}     60000  global    marked global_memory()"
    assert text[6] == "  warning: " + report.warnings[0]
    assert len(text) == 7


def test_a_report_of_no_arrays():
    @cupric.kernel
    def bare(x):
        i = grid(1)
        x[i] = 1.0

    report = bare.inspect_constants(F64)
    assert report.entries == () and report.constant_bytes == 0
    assert str(report).splitlines() == [
        "kernel bare: 0 of 65536 constant bytes (0.0 %), 0 bytes of module data in global "
        "memory", "  (no module-level arrays)"]


def test_an_overfull_bank_is_an_error_in_the_report_too():
    @cupric.kernel
    def over(x):
        i = grid(1)
        x[i] = FULL_MARKED[i] + ONE_BYTE[0]

    with pytest.raises(CompileError) as info:
        over.inspect_constants(F64)
    text = str(info.value)
    assert "arrays marked constant() need 65537 bytes" in text
    assert "mark it global_memory(), or pass it as a kernel argument" in text
    with pytest.raises(CompileError) as info:
        over.inspect_ir(F64)
    assert "mark it global_memory(), or pass it as a kernel argument" in str(info.value)


def test_a_packing_function_sees_every_candidate():
    seen = []

    def last_used_first(candidates):
        seen.extend(candidates)
        return sorted(candidates, key=lambda c: -c.order)

    @cupric.kernel
    @constant_policy(packing=last_used_first)
    def ranked(x):
        i = grid(1)
        x[i] = C20[i] + A40[i] + GRID2D[1, i % 3]

    found, _ = placement(ranked)
    module = ranked.py_func.__module__
    assert [(c.name, c.module, c.nbytes, c.shape, c.dtype, c.order) for c in seen] == [
        ("C20", module, 20_000, (20_000,), np.dtype(np.uint8), 0),
        ("A40", module, 40_000, (40_000,), np.dtype(np.uint8), 1),
        ("GRID2D", module, 24, (2, 3), np.dtype(np.int32), 2)]
    # Offered GRID2D, A40 (40 024), C20 (60 024): all fit.
    assert spaces(found) == {"C20": 4, "A40": 4, "GRID2D": 4}


def test_packing_by_module_keeps_the_kernels_own_module_first():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    import _boundaries_const_other as other

    @cupric.kernel
    @constant_policy(packing="by_module")
    def mine_first(x):
        i = grid(1)
        x[i] = other.read_other(i) + A40[i]

    found, messages = placement(mine_first)
    # The kernel's module's A40 goes first (40 000); the other module's 30 000 spills.
    assert spaces(found) == {"OTHER30": 1, "A40": 4}
    report = mine_first.inspect_constants(F64)
    modules = {e.name: (e.module, e.space) for e in report.entries}
    assert modules == {"OTHER30": ("_boundaries_const_other", "global"),
                       "A40": (mine_first.py_func.__module__, "constant")}


def test_other_custom_lowered_statements_are_not_taken_for_arrays():
    @cupric.kernel
    def with_print(x):
        i = grid(1)
        print("value", x[i])
        assert x[i] >= 0.0
        x[i] = PLAIN_SMALL[i % 10]

    found, messages = placement(with_print)
    assert spaces(found) == {"PLAIN_SMALL": 4} and messages == []
    assert [e.name for e in with_print.inspect_constants(F64).entries] == ["PLAIN_SMALL"]

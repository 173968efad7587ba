"""Kernels outside the kernel language. Each is registered with its signature; the line
that must be blamed carries a trailing `# ERROR: <regex>` comment that the message must
match (tests/compiler/test_frontend_errors.py)."""

import math

import numpy as np

import cupric
from cupric.device import atomic, constant, float3, grid, local, shared, syncthreads, threadIdx
from cupric.types import Array, f32, f64, i32, i64, u8, u64

CASES = []
HOST_ARRAY = np.zeros(4, dtype=np.complex128)
LABEL = "text"
TABLE = constant(np.arange(8, dtype=np.float32))
PLAIN_TABLE = np.arange(4, dtype=np.int32)
POINT = np.dtype([("x", np.float32), ("y", np.float32)])
F1 = "Array[f32, 1, 'C']"


def bad(signature):
    def register(fn):
        CASES.append((fn, signature))
        return fn
    return register


def helper(x):
    return x + 1


@cupric.device_function
def recursive(n):
    return recursive(n - 1) if n > 0 else 0  # ERROR: recursion is not supported


@cupric.device_function
def returns_both(x):
    if x > 0:
        return x
    return  # ERROR: returns a value on some paths and nothing on others


@cupric.device_function
def two(a, b):
    return a + b


@bad(F1)
def undefined_name(x):
    x[0] = y  # ERROR: name 'y' is not defined  # noqa: F821


@bad(F1)
def list_literal(x):
    v = [1, 2]  # ERROR: lists are not supported
    x[0] = v[0]


@bad(F1)
def comprehension(x):
    v = tuple(i for i in range(3))  # ERROR: generator expressions are not supported
    x[0] = v[0]


@bad(F1)
def dict_literal(x):
    d = {1: 2}  # ERROR: dicts are not supported
    x[0] = d[1]


@bad(F1)
def lambda_expr(x):
    f = lambda v: v  # ERROR: lambdas are not supported  # noqa: E731
    x[0] = f(1)


@bad(F1)
def string_constant(x):
    s = "hello"  # ERROR: strings are not supported
    x[0] = len(s)


@bad(F1)
def fstring(x):
    s = f"{x}"  # ERROR: strings are not supported
    x[0] = 0


@bad(F1)
def with_statement(x):
    with open("f"):  # ERROR: with-statements are not supported
        x[0] = 1


@bad(F1)
def try_statement(x):
    try:  # ERROR: try/except are not supported
        x[0] = 1
    except Exception:
        pass


@bad(F1)
def raise_statement(x):
    raise ValueError()  # ERROR: raise are not supported


@bad(F1)
def nested_def(x):
    def inner():  # ERROR: nested functions are not supported
        return 1
    x[0] = 1


@bad(F1)
def import_inside(x):
    import os  # ERROR: imports are not supported  # noqa: F401
    x[0] = 1


@bad(F1)
def global_decl(x):
    global LABEL  # ERROR: global declarations are not supported
    x[0] = 1


@bad(F1)
def type_conflict(x):
    v = 1.0
    v = x  # ERROR: type conflict: 'v' was
    x[0] = 1


@bad(F1)
def bool_and_number(x):
    flag = True
    flag = 2.5  # ERROR: booleans do not mix with numbers
    x[0] = 1


@bad(F1)
def array_plus_number(x):
    x[0] = x + 1  # ERROR: unsupported operand for \+: an array


@bad(F1)
def slicing(x):
    x[0] = x[1:3]  # ERROR: slicing is not supported


@bad("Array[f32, 2, 'C']")
def too_few_indices(x):
    x[0] = 1.0  # ERROR: a 2-D array needs 2 indices, got 1


@bad(F1)
def float_index(x):
    x[1.5] = 1.0  # ERROR: array indices must be integers


@bad(F1)
def tuple_item_assign(x):
    t = (1, 2)
    t[0] = 3  # ERROR: tuples are immutable
    x[0] = t[0]


@bad(F1)
def tuple_variable_index(x):
    t = (1, 2)
    k = 1
    x[0] = t[k]  # ERROR: tuples are indexed by integer constants only


@bad(F1)
def tuple_index_range(x):
    t = (1, 2)
    x[0] = t[5]  # ERROR: tuple index 5 out of range


@bad(F1)
def unpack_mismatch(x):
    a, b, c = (1, 2)  # ERROR: cannot unpack a tuple of 2 into 3 names
    x[0] = a


@bad(F1)
def kernel_returns_value(x):
    return 1  # ERROR: kernels cannot return a value


@bad(F1)
def plain_python_call(x):
    x[0] = helper(1)  # ERROR: plain Python function


@bad(F1)
def calls_recursive(x):
    x[0] = recursive(3)


@bad(F1)
def inconsistent_returns(x):
    x[0] = returns_both(1)


@bad(F1)
def device_arg_count(x):
    x[0] = two(1)  # ERROR: two\(\) takes 2 arguments, got 1


@bad(F1)
def keyword_arguments(x):
    x[0] = two(1, b=2)  # ERROR: keyword arguments are not supported


@bad(F1)
def for_over_array(x):
    for v in x:  # ERROR: iterate over range\(\.\.\.\) only
        x[0] = v


@bad(F1)
def for_else(x):
    for i in range(3):  # ERROR: for \.\.\. else is not supported
        x[i] = 1
    else:
        x[0] = 2


@bad(F1)
def while_else(x):
    while x[0] < 1:  # ERROR: while \.\.\. else is not supported
        x[0] += 1
    else:
        x[0] = 2


@bad(F1)
def range_float(x):
    for i in range(1.5):  # ERROR: range\(\) arguments must be integers
        x[0] = 1


@bad(F1)
def range_step_zero(x):
    for i in range(0, 5, 0):  # ERROR: range\(\) step must not be zero
        x[i] = 1


@bad(F1)
def range_outside_for(x):
    r = range(3)  # ERROR: range\(\) is only allowed as the iterable of a for loop
    x[0] = 1


@bad(F1)
def host_array_global(x):
    x[0] = HOST_ARRAY[0]  # ERROR: module-level arrays in kernels must have a numeric


@bad(F1)
def string_global(x):
    x[0] = LABEL  # ERROR: constants of type str are not supported


@bad(F1)
def unknown_attribute(x):
    x[0] = x.foo  # ERROR: arrays in kernels have \.shape


@bad(F1)
def math_unknown(x):
    x[0] = math.frobnicate(1.0)  # ERROR: has no attribute 'frobnicate'


@bad(F1)
def math_arity(x):
    x[0] = math.sqrt(1.0, 2.0)  # ERROR: math\.sqrt\(\) takes 1 argument, got 2


@bad(F1)
def grid_non_constant(x):
    n = 2
    i = grid(n)  # ERROR: takes one constant argument
    x[0] = 1


@bad(F1)
def syncthreads_args(x):
    syncthreads(1)  # ERROR: takes no arguments


@bad(F1)
def invert_float(x):
    x[0] = ~x[0]  # ERROR: ~ needs an integer


@bad(F1)
def shift_float(x):
    x[0] = x[0] << 2  # ERROR: << needs integers


@bad(F1)
def u64_with_signed(x):
    a = u64(1)
    b = i64(2)
    x[0] = a + b  # ERROR: have no common integer type


@bad(F1)
def literal_does_not_fit(x):
    v = i32(1)
    x[0] = v + 10000000000  # ERROR: does not fit in i32


@bad(F1)
def constant_division_by_zero(x):
    x[0] = 1 // 0  # ERROR: constant expression fails


@bad(F1)
def is_comparison(x):
    x[0] = 1 if x[0] is None else 2  # ERROR: is / in comparisons are not supported


@bad(F1)
def attribute_store(x):
    x.shape = (1,)  # ERROR: attributes cannot be assigned


@bad(F1)
def call_non_callable(x):
    n = 3
    x[0] = n(1)  # ERROR: is not callable


@bad(F1)
def dim3_call(x):
    x[0] = threadIdx()  # ERROR: is not callable; use its attributes


@bad(F1)
def star_args(x, *rest):  # ERROR: plain positional parameters
    x[0] = 1


@bad(F1)
def matmul_operator(x):
    x[0] = x[0] @ x[0]  # ERROR: the @ operator is not supported


@bad(F1)
def annotation_conflict(x):
    v: f32 = 1.0
    v = x  # ERROR: 'v' is declared f32
    x[0] = v


@bad(F1)
def bad_local_annotation(x):
    v: list = 1  # ERROR: a local annotation must be a cupric scalar type
    x[0] = v


@bad(F1)
def store_tuple_into_array(x):
    x[0] = (1, 2)  # ERROR: cannot store a tuple


@bad(F1)
def cast_of_array(x):
    x[0] = f64(x)  # ERROR: cannot cast an array


@bad(F1)
def walrus(x):
    if (n := 3) > 2:  # ERROR: assignment expressions
        x[0] = n


@bad(F1)
def assert_statement(x):
    assert x[0] > 0, x  # ERROR: the message of an assert in a kernel must be a constant


@bad(F1)
def delete_statement(x):
    v = 1
    del v  # ERROR: del are not supported
    x[0] = 1


@bad(F1)
def complex_number(x):
    x[0] = 1j  # ERROR: complex numbers are not supported


@bad(F1)
def min_of_one(x):
    x[0] = min(x[0])  # ERROR: min\(\) in kernels takes two or more numbers


@bad(F1)
def len_of_number(x):
    x[0] = len(x[0])  # ERROR: len\(\) of f32


@bad(F1)
def condition_array(x):
    if x:  # ERROR: a condition must be a bool or a number
        x[0] = 1




# -- added with the simulator's front end (issue 15): every case is also launched on the
# -- simulator, which must refuse it at the same line before running anything.

@bad(F1)
def write_constant_array(x):
    TABLE[0] = x[0]  # ERROR: module-level array: read-only data


@bad(F1)
def write_plain_module_array(x):
    PLAIN_TABLE[1] = 3  # ERROR: module-level array: read-only data


@bad(F1)
def augassign_constant_array(x):
    TABLE[2] += 1.0  # ERROR: module-level array: read-only data


@bad(F1)
def atomic_on_constant_array(x):
    atomic.add(TABLE, 0, 1.0)  # ERROR: module-level array: read-only data


@bad(F1)
def shared_nonconstant_shape(x):
    n = 16
    n += 1
    tile = shared.array(n, f32)  # ERROR: 'n' is not a compile-time constant
    x[0] = tile[0]


@bad(F1)
def local_nonconstant_shape(x):
    k = x.size
    buf = local.array(k, f32)  # ERROR: 'k' is not a compile-time constant
    x[0] = buf[0]


@bad(F1)
def shared_zero_shape(x):
    tile = shared.array(0, f32)  # ERROR: every dimension must be positive
    x[0] = tile[0]


@bad(F1)
def shared_bad_dtype(x):
    tile = shared.array(4, complex)  # ERROR: has no cupric scalar type
    x[0] = tile[0]


@bad(F1)
def list_argument_of_call(x):
    x[0] = max([1, 2])  # ERROR: lists are not supported


@bad(F1)
def set_literal(x):
    s = {1, 2}  # ERROR: sets are not supported
    x[0] = 1


@bad(F1)
def set_comprehension(x):
    s = {i for i in range(3)}  # ERROR: comprehensions are not supported
    x[0] = 1


@bad(F1)
def list_comprehension(x):
    s = [i for i in range(3)]  # ERROR: comprehensions are not supported
    x[0] = 1


@bad(F1)
def yield_in_kernel(x):
    yield 1  # ERROR: generators are not supported
    x[0] = 1


@bad(F1)
def in_comparison(x):
    if 1 in (1, 2):  # ERROR: is / in comparisons are not supported
        x[0] = 1


@bad(F1)
def match_statement(x):
    match x[0]:  # ERROR: match statements are not supported
        case 1:
            x[0] = 2


@bad(F1)
def class_inside(x):
    class Inner:  # ERROR: class definitions are not supported
        pass
    x[0] = 1


@bad(F1)
def bytes_constant(x):
    b = b"ab"  # ERROR: strings are not supported
    x[0] = 1


@bad(F1)
def ellipsis_constant(x):
    e = ...  # ERROR: \.\.\. is not supported
    x[0] = 1


@bad(F1)
def string_index(x):
    x["a"] = 1.0  # ERROR: strings are not supported


@bad(F1)
def call_a_kernel(x):
    kernel_target[1, 1](x)  # ERROR: kernel kernel_target cannot be launched from kernel


@bad(F1)
def float_shift(x):
    x[0] = 1 << x[0]  # ERROR: << needs integers


@bad(F1)
def bool_invert(x):
    flag = x[0] > 0
    x[0] = ~flag  # ERROR: ~ needs an integer


@bad(F1)
def float_bitand(x):
    x[0] = x[0] & 1  # ERROR: & needs integers or bools


@bad("Array[u64, 1, 'C'], i64")
def u64_and_i64_compare(x, n):
    if x[0] < n:  # ERROR: cannot compare
        x[0] = 1


@bad("Array[i64, 1, 'C']")
def literal_too_big_for_i64(x):
    x[0] = x[0] * 0x9E3779B97F4A7C15  # ERROR: does not fit in i64


@bad("Array[u8, 1, 'C']")
def literal_too_big_for_u8(x):
    x[0] = x[0] + 300  # ERROR: does not fit in u8


@bad(F1)
def literal_too_big_for_64_bits(x):
    x[0] = 2 ** 70  # ERROR: does not fit in 64 bits


@bad(F1)
def negative_shift_constant(x):
    x[0] = 1 << -1  # ERROR: constant expression fails


@bad(F1)
def modulo_by_zero_constant(x):
    x[0] = 7 % 0  # ERROR: constant expression fails


@bad(F1)
def tuple_index_negative_out_of_range(x):
    t = (1, 2)
    x[0] = t[-3]  # ERROR: tuple index -3 out of range


@bad(F1)
def unpack_number(x):
    a, b = x[0]  # ERROR: cannot unpack f32


@bad(F1)
def store_array_into_array(x):
    x[0] = x  # ERROR: cannot store an array


@bad(F1)
def vector_wrong_arity(x):
    v = float3(1.0, 2.0)  # ERROR: float3 takes 3 components
    x[0] = v.x


@bad(F1)
def vector_bad_field(x):
    v = float3(1.0, 2.0, 3.0)
    x[0] = v.w  # ERROR: has no field 'w'


@bad(F1)
def math_of_array(x):
    x[0] = math.sin(x)  # ERROR: math\.sin\(\) needs numbers


@bad(F1)
def abs_of_two(x):
    x[0] = abs(x[0], 1.0)  # ERROR: abs\(\) takes one number


@bad(F1)
def cast_two_arguments(x):
    x[0] = f32(1.0, 2.0)  # ERROR: takes exactly one argument


@bad(F1)
def cast_of_tuple(x):
    x[0] = i32((1, 2))  # ERROR: cannot cast


@bad("Array[f32, 1, 'C'], i32")
def annotated_int_assigned_float(x, n):
    m: i32 = 0
    m = x  # ERROR: 'm' is declared i32; cannot assign
    x[0] = n


@bad(F1)
def keyword_to_cast(x):
    x[0] = f32(x=1.0)  # ERROR: keyword arguments are not supported


@bad(F1)
def intrinsic_bad_keyword(x):
    atomic.add(x, 0, 1.0, scope="galaxy")  # ERROR: scope= must be one of


@bad(F1)
def struct_field_write_on_argument(x):
    x.size = 3  # ERROR: attributes cannot be assigned


@bad(F1)
def printf_bad_spec(x):
    print(f"{x[0]:q}")  # ERROR: format spec 'q' is not supported


@bad(F1)
def ifexp_branch_types(x):
    x[0] = x if x[0] > 0 else 1.0  # ERROR: the two branches have different types


@bad(F1)
def return_in_loop_value(x):
    for i in range(3):
        return i  # ERROR: kernels cannot return a value


@cupric.kernel
def kernel_target(x):
    x[0] = 1

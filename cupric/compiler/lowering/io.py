"""Talking to the host from compiled kernels: `print(...)` (CUDA's `vprintf` with a packed
argument buffer), `assert cond, "message"` (`__assertfail`, which stops the kernel and
makes the launch fail with CUDA_ERROR_ASSERT after the driver prints the message), and
the `cupric.device.io` intrinsics: `trap` (`llvm.trap`), `clock`/`clock64`
(`%clock`, `%clock64`) and `globaltimer` (`%globaltimer`).

print and assert are statements of the language, not intrinsics: the typer hands them
to `type_print`/`type_assert`, which record a "custom" lowering for codegen.
"""

from __future__ import annotations

import ast
import os

from cupric.compiler.codegen.values import KValue
from cupric.compiler.ir import types as ll
from cupric.compiler.ir.values import const_int
from cupric.compiler.lowering.memory import string_pointer
from cupric.compiler.lowering.registry import register
from cupric.compiler.typing.ktypes import NONE, WeakType, materialize
from cupric.types import ScalarType, i64, u32, u64

__all__ = ["type_print", "type_assert", "printf", "assert_fail"]

_SPEC_TYPES = "dioxXufFeEgG"


# -- printf ----------------------------------------------------------------------------------

def printf(cg, fmt: str, values) -> None:
    """Emit `vprintf(fmt, buffer)`; `values` are IR values of types i32/i64/double/i8*
    already matching the conversions in `fmt` (C varargs promotions applied)."""
    b = cg.b
    fmt_ptr = string_pointer(cg, fmt)
    if values:
        buffer_type = ll.StructType([v.type for v in values])
        slot = cg.entry_builder.alloca(buffer_type, align=8, hint="printf")
        zero = const_int(ll.i32, 0)
        for k, v in enumerate(values):
            field = b.gep(slot, [zero, const_int(ll.i32, k)], inbounds=True,
                          result_type=ll.PointerType(v.type))
            b.store(v, field)
        args = b.cast("bitcast", slot, ll.PointerType(ll.i8))
    else:
        from cupric.compiler.ir.values import null
        args = null(ll.PointerType(ll.i8))
    cg.mcg.call_external(b, "vprintf", ll.i32, [fmt_ptr, args])


def _escape(text: str) -> str:
    return text.replace("%", "%%")


def _promote(cg, kv, node, spec: str | None = None):
    """(printf conversion, IR value) of one scalar argument, with C's promotions."""
    b = cg.b
    t = kv.type
    if isinstance(t, WeakType):
        kv = cg.convert(kv, t.default, node)
        t = kv.type
    if t.kind == "b":
        # Python prints True / False.
        text = b.select(kv.value, string_pointer(cg, "True"), string_pointer(cg, "False"))
        return "%s", text
    if t.kind == "f":
        v = kv.value if t.bits == 64 else b.cast("fpext", kv.value, ll.double)
        return f"%{spec or 'g'}", v
    wide = cg.convert(kv, i64 if t.kind == "i" else u64, node).value
    conv = spec or ("d" if t.kind == "i" else "u")
    return f"%{conv[:-1]}ll{conv[-1]}", wide


def _format_spec(spec_node, what_node, typer) -> str | None:
    if spec_node is None:
        return None
    if not (isinstance(spec_node, ast.JoinedStr) and len(spec_node.values) == 1
            and isinstance(spec_node.values[0], ast.Constant)):
        raise typer.error(what_node, "format specs in kernel f-strings must be constant")
    spec = spec_node.values[0].value
    if not spec or spec[-1] not in _SPEC_TYPES or any(c in spec[:-1] for c in "<>^=,_"):
        raise typer.error(what_node, f"format spec {spec!r} is not supported in kernels",
                          hint="use printf-like specs: 8.3f, x, 5d, e, g")
    return spec


def _print_items(typer, node):
    """The pieces of a print call: ("text", str) or ("value", expr node, spec)."""
    items = []
    sep, end = " ", "\n"
    for kw in node.keywords:
        if kw.arg not in ("sep", "end") or not (isinstance(kw.value, ast.Constant) and
                                                isinstance(kw.value.value, str)):
            raise typer.error(kw, "print() in kernels takes only sep= and end= with constant "
                              "strings")
        if kw.arg == "sep":
            sep = kw.value.value
        else:
            end = kw.value.value
    for k, arg in enumerate(node.args):
        if k:
            items.append(("text", sep))
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            items.append(("text", arg.value))
        elif isinstance(arg, ast.JoinedStr):
            for part in arg.values:
                if isinstance(part, ast.Constant):
                    items.append(("text", part.value))
                else:
                    if part.conversion not in (-1, None):
                        raise typer.error(part, "!r/!s/!a conversions are not supported in "
                                          "kernels")
                    items.append(("value", part.value, _format_spec(part.format_spec, part,
                                                                    typer)))
        else:
            items.append(("value", arg, None))
    items.append(("text", end))
    return items


def type_print(typer, node: ast.Call):
    """Type `print(...)` in a kernel: constant strings, f-strings and scalars."""
    items = _print_items(typer, node)
    for item in items:
        if item[0] != "value":
            continue
        t = typer.expr(item[1])
        from cupric.compiler.typing.infer import UNKNOWN
        if t is UNKNOWN:
            continue
        if not isinstance(materialize(t), ScalarType):
            raise typer.error(item[1], f"print() in kernels prints numbers, bools and "
                              f"constant strings, not {t!r}")
        spec = item[2]
        if spec and materialize(t).kind == "f" and spec[-1] not in "fFeEgG":
            raise typer.error(item[1], f"format spec {spec!r} does not fit a float")
        if spec and materialize(t).kind in "iu" and spec[-1] not in "dioxXu":
            raise typer.error(item[1], f"format spec {spec!r} does not fit an integer")

    def lower(cg, call_node):
        fmt = []
        values = []
        for item in items:
            if item[0] == "text":
                fmt.append(_escape(item[1]))
                continue
            conv, v = _promote(cg, cg.expr(item[1]), item[1], item[2])
            fmt.append(conv)
            values.append(v)
        printf(cg, "".join(fmt), values)
        return KValue(NONE, [])

    typer.fn.targets[node] = ("custom", lower)
    return NONE


# -- assert ----------------------------------------------------------------------------------

def assert_fail(cg, message: str, node) -> None:
    """Call `__assertfail` (never returns: the launch fails with CUDA_ERROR_ASSERT and the
    driver prints `message` with the Python file and line)."""
    b = cg.b
    src = cg.src
    line = getattr(node, "lineno", src.tree.lineno)
    filename = os.path.abspath(src.filename)
    ftype = ll.FunctionType(ll.void, [ll.PointerType(ll.i8), ll.PointerType(ll.i8), ll.i32,
                                      ll.PointerType(ll.i8), ll.i64])
    cg.mcg.module.declare("__assertfail", ftype, attributes="noreturn nounwind")
    b.call("__assertfail", ftype, [string_pointer(cg, f"{filename}:{line}: {message}"),
                                   string_pointer(cg, filename), const_int(ll.i32, line),
                                   string_pointer(cg, src.name), const_int(ll.i64, 1)])


def type_assert(typer, s: ast.Assert) -> None:
    """Type `assert cond[, "message"]`: the message must be a constant string."""
    typer._condition(s.test)
    msg = s.msg
    if msg is not None and not (isinstance(msg, ast.Constant) and isinstance(msg.value, str)):
        raise typer.error(msg, "the message of an assert in a kernel must be a constant "
                          "string")
    text = msg.value if msg is not None else f"assertion failed: {ast.unparse(s.test)}"
    if msg is not None:
        text = f"assertion failed: {text}"

    def lower(cg, stmt):
        cond = cg.truth(_concrete(cg, cg.expr(stmt.test), stmt.test))
        fail = cg.fn.append_block("assert.fail")
        ok = cg.fn.append_block("assert.ok")
        cg.b.cbranch(cond, ok, fail)
        cg.b.position_at_end(fail)
        from cupric.compiler.device_errors import KIND_ASSERT, emit_record
        emit_record(cg, KIND_ASSERT, stmt, text)  # what the raised exception will say
        assert_fail(cg, text, stmt)
        cg.b.unreachable()
        cg.b.position_at_end(ok)

    typer.fn.targets[s] = ("custom", lower)


def _concrete(cg, kv, node):
    if isinstance(kv.type, WeakType):
        return cg.convert(kv, kv.type.default, node)
    return kv


# -- trap and clocks -------------------------------------------------------------------------

def _no_args(what, result):
    def infer(call):
        if call.arg_types or call.keywords:
            raise TypeError(f"{what}() takes no arguments")
        return result
    return infer


def _trap_lower(cg, call, args):
    cg.mcg.module.declare("llvm.trap", ll.FunctionType(ll.void, []),
                          attributes="noreturn nounwind")
    cg.b.call("llvm.trap", ll.FunctionType(ll.void, []), [])
    cg.b.unreachable()
    cg.b.position_at_end(cg.fn.append_block("after.trap"))
    return KValue(NONE, [])


def _timer(what: str, register_name: str, result, bits: int):
    def lower(cg, call, args):
        # Volatile inline PTX: every call reads the counter anew (never hoisted or merged).
        lt = ll.IntType(bits)
        r = cg.b.inline_asm(ll.FunctionType(lt, []), f"mov.u{bits} $0, %{register_name};",
                            "=r" if bits == 32 else "=l", [])
        return KValue(result, [r])
    register(what, _no_args(what, result), lower)


register("trap", _no_args("trap", NONE), _trap_lower)
_timer("clock", "clock", u32, 32)
_timer("clock64", "clock64", i64, 64)
_timer("globaltimer", "globaltimer", u64, 64)

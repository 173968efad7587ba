"""Differential fuzzing of the kernel language: random expression and control-flow
kernels, each evaluated three ways — a NumPy reference of the documented semantics
(docs/kernel-language.md, "Semantics of arithmetic"; written here independently of the
simulator), the simulator (`kern.simulate`), and on a GPU the compiled kernel — and
compared element by element.

The reference knows where the language leaves a result undefined (integer division by
zero, `MIN // -1`, a float converted to an integer out of range or NaN) and marks those
elements, which are not compared. Values computed by a transcendental function are
marked inexact: compiled code calls libdevice, whose last bits may differ from the
simulator's (and NumPy's vectorized functions from its scalar ones), so they compare
within a relative tolerance of 1e-5; beyond it (an ulp difference amplified by
cancellation) and where such a value decides an integer or a bool, the element counts as
an explained difference, reported but not failing. Every other element must be
equal bit for bit (NaN equal to NaN). Kernels are compiled with `fma=False`: contraction
into fused multiply-adds changes roundings, and is a documented option.

Run it alone: `python3 tests/simulator/fuzz.py --count 10000 [--gpu] [--seed S]`;
CUPRIC_FUZZ_COUNT sets the count of the test suite's runs.
"""

from __future__ import annotations

import argparse
import linecache
import math
import random
import sys
import time
from dataclasses import dataclass, field

import numpy as np

N = 64  # threads (elements) per kernel

INT = ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64")
FLOAT = ("f32", "f64")
TYPES = INT + FLOAT + ("bool",)
DTYPE = {n: np.dtype(n.replace("f", "float").replace("i", "int").replace("u", "uint"))
         for n in INT + FLOAT}
DTYPE["bool"] = np.dtype(bool)
DTYPE.update({"i8": np.dtype(np.int8), "i16": np.dtype(np.int16), "i32": np.dtype(np.int32),
              "i64": np.dtype(np.int64), "u8": np.dtype(np.uint8), "u16": np.dtype(np.uint16),
              "u32": np.dtype(np.uint32), "u64": np.dtype(np.uint64),
              "f32": np.dtype(np.float32), "f64": np.dtype(np.float64)})
NAME = {v: k for k, v in DTYPE.items()}
MATH1 = ("sqrt", "exp", "log", "sin", "cos", "tanh", "atan", "log1p", "expm1", "fabs",
         "asin", "acosh", "erf", "lgamma", "cbrt")
MATH_INT = ("floor", "ceil", "trunc")
MATH_BOOL = ("isnan", "isinf", "isfinite")
_NP = {"sqrt": np.sqrt, "exp": np.exp, "log": np.log, "sin": np.sin, "cos": np.cos,
       "tanh": np.tanh, "atan": np.arctan, "log1p": np.log1p, "expm1": np.expm1,
       "fabs": np.fabs, "asin": np.arcsin, "acosh": np.arccosh, "cbrt": np.cbrt,
       "erf": np.vectorize(math.erf, otypes=[np.float64]),
       "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc,
       "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite}


def _lgamma(x):
    def one(v):
        if math.isnan(v):
            return v
        if math.isinf(v):
            return math.inf
        try:
            return math.lgamma(v)
        except ValueError:
            return math.inf
        except OverflowError:
            return math.inf
    return np.vectorize(one, otypes=[np.float64])(x)


_NP["lgamma"] = _lgamma


# -- values of the reference: arrays over the threads, with masks -------------------------

@dataclass
class V:
    """A node's values over the N threads: `a` (dtype of `t`), `undef` (the language
    leaves the element undefined), `inexact` (a libdevice result flowed into it)."""
    t: str
    a: np.ndarray
    undef: np.ndarray = field(default_factory=lambda: np.zeros(N, bool))
    inexact: np.ndarray = field(default_factory=lambda: np.zeros(N, bool))


def _bits(t):
    return DTYPE[t].itemsize * 8


def _is_int(t):
    return t in INT


def convert(v: V, t: str) -> V:
    """C conversion (documented): ints wrap, float->int truncates (undefined out of range
    or NaN), to bool is truth."""
    if v.t == t:
        return v
    undef, inexact = v.undef.copy(), v.inexact.copy()
    if t == "bool":
        return V(t, v.a != 0, undef, inexact)
    if v.t in FLOAT and _is_int(t):
        info = np.iinfo(DTYPE[t])
        values, bad = [], np.zeros(N, bool)
        for k, x in enumerate(v.a.astype(np.float64)):
            n = int(x) if math.isfinite(x) else None
            if n is None or not info.min <= n <= info.max:
                bad[k] = True
                n = 0
            values.append(n)
        return V(t, np.array(values, dtype=object).astype(DTYPE[t]), undef | bad, inexact)
    if v.t == "bool":
        return V(t, v.a.astype(DTYPE[t]), undef, inexact)
    if _is_int(v.t) and _is_int(t):
        ints = [int(x) for x in v.a]
        m = 1 << _bits(t)
        wrapped = [(x % m) - (m if t[0] == "i" and x % m >= m // 2 else 0) for x in ints]
        return V(t, np.array(wrapped, dtype=object).astype(DTYPE[t]), undef, inexact)
    if _is_int(v.t) and t in FLOAT:
        # int -> float rounds to nearest: through Python ints, exactly then rounded
        if t == "f64":
            return V(t, np.array([float(int(x)) for x in v.a], np.float64), undef, inexact)
        return V(t, np.array([np.float32(_round_f32(int(x))) for x in v.a], np.float32),
                 undef, inexact)
    with np.errstate(all="ignore"):
        return V(t, v.a.astype(DTYPE[t]), undef, inexact)


def _round_f32(n: int) -> float:
    """An integer rounded to the nearest f32 (ties to even), exactly."""
    if n == 0:
        return 0.0
    sign = -1 if n < 0 else 1
    n = abs(n)
    e = n.bit_length() - 24
    if e <= 0:
        return float(sign * n)
    q, r = divmod(n, 1 << e)
    half = 1 << (e - 1)
    if r > half or (r == half and q & 1):
        q += 1
    return float(sign * q * (1 << e))


def promote(a: str, b: str) -> str | None:
    """The documented promotion of two typed operands; None when refused."""
    if a == b:
        return a
    if a == "bool":
        return b
    if b == "bool":
        return a
    kinds = {a[0], b[0]}
    if kinds == {"i", "u"} and "u64" in (a, b):
        return None
    return NAME[np.promote_types(DTYPE[a], DTYPE[b])]


# -- expressions ---------------------------------------------------------------------------

class Node:
    t: str
    text: str

    def eval(self, env) -> V:
        raise NotImplementedError


class Var(Node):
    def __init__(self, name, t):
        self.name, self.t, self.text = name, t, name

    def eval(self, env):
        return env[self.name]


class Lit(Node):
    """A literal: weak (takes the other operand's type)."""
    def __init__(self, value):
        self.value = value
        self.t = "weak_float" if isinstance(value, float) else "weak_int"
        self.text = repr(value) if value >= 0 else f"({value!r})"

    def eval(self, env):
        raise AssertionError("literals are evaluated in their context")

    def as_type(self, t) -> V:
        if t in FLOAT:
            return V(t, np.full(N, self.value, DTYPE[t]))
        if t == "bool":
            return V(t, np.full(N, bool(self.value)))
        return V(t, np.full(N, self.value, object).astype(DTYPE[t]))


class Bin(Node):
    def __init__(self, op, left, right, t, compute):
        self.op, self.l, self.r, self.t, self.compute = op, left, right, t, compute
        self.text = f"({left.text} {op} {right.text})"

    def eval(self, env):
        ct = self.compute
        a = _operand(self.l, ct, env)
        b = _operand(self.r, ct, env)
        return binop(self.op, a, b, ct, self.t)


def _operand(node, t, env) -> V:
    if isinstance(node, Lit):
        return node.as_type(t)
    return convert(node.eval(env), t)


def binop(op, a: V, b: V, ct: str, rt: str) -> V:
    undef = a.undef | b.undef
    inexact = a.inexact | b.inexact
    x, y = a.a, b.a
    with np.errstate(all="ignore"):
        if op in ("<", "<=", ">", ">=", "==", "!="):
            r = {"<": np.less, "<=": np.less_equal, ">": np.greater,
                 ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal}[op](x, y)
            return V("bool", r, undef, inexact)
        if op == "/":
            return V(rt, x.astype(DTYPE[rt]) / y.astype(DTYPE[rt]), undef, inexact)
        if ct in FLOAT:
            if op == "+":
                r = x + y
            elif op == "-":
                r = x - y
            elif op == "*":
                r = x * y
            elif op in ("//", "%"):
                r = np.array([_py_floor(op, float(p), float(q)) for p, q in zip(x, y)],
                             dtype=np.float64).astype(DTYPE[ct])
                if ct == "f32":  # f32 quotients: Python's exact rule on the f32 values
                    exact = np.array([_py_floor(op, float(p), float(q)) for p, q in zip(x, y)])
                    inexact = inexact | (np.float64(r) != exact)
            elif op == "**":
                r = np.power(x.astype(np.float64), y.astype(np.float64)).astype(DTYPE[ct])
                inexact = inexact | True
            else:
                raise AssertionError(op)
            return V(ct, np.asarray(r, DTYPE[ct]), undef, inexact)
        # integers (and bools for & | ^) exactly, through Python ints, then wrapped
        xs, ys = [int(v) for v in x], [int(v) for v in y]
        out = []
        bits = _bits(ct) if ct != "bool" else 1
        for k, (p, q) in enumerate(zip(xs, ys)):
            if op in ("//", "%"):
                if q == 0 or (ct[0] == "i" and p == -(1 << (bits - 1)) and q == -1):
                    undef[k] = True
                    out.append(0)
                    continue
                out.append(p // q if op == "//" else p % q)
            elif op == "**":
                out.append(0 if q < 0 else pow(p, q, 1 << bits))
            elif op == "<<":
                out.append(p << q)
            elif op == ">>":
                out.append(p >> q)
            else:
                out.append({"+": p + q, "-": p - q, "*": p * q, "&": p & q, "|": p | q,
                            "^": p ^ q}[op])
        if ct == "bool":
            return V("bool", np.array(out, bool), undef, inexact)
        m = 1 << bits
        vals = [(v % m) - (m if ct[0] == "i" and v % m >= m // 2 else 0) for v in out]
        return V(ct, np.array(vals, dtype=object).astype(DTYPE[ct]), undef, inexact)


def _py_floor(op, p, q):
    try:
        return p // q if op == "//" else p % q
    except ZeroDivisionError:
        if op == "%":
            return math.nan
        return math.nan if p == 0 or p != p else math.nan


class Unary(Node):
    def __init__(self, op, operand, t):
        self.op, self.o, self.t = op, operand, t
        self.text = f"({op}{' ' if op == 'not' else ''}{operand.text})"

    def eval(self, env):
        v = convert(self.o.eval(env), self.t) if self.op != "not" else self.o.eval(env)
        with np.errstate(all="ignore"):
            if self.op == "not":
                return V("bool", ~(v.a != 0), v.undef, v.inexact)
            if self.op == "-":
                if self.t in FLOAT:
                    return V(self.t, -v.a, v.undef, v.inexact)
                out = _wrap_list([-int(x) for x in v.a], self.t, v)
                if self.t in ("i8", "i16"):
                    # documented: -MIN of i8/i16 is undefined in compiled code (the GPU
                    # gave the unwrapped +128 / +32768, seen on sm_90 with CUDA 13.0)
                    out.undef = out.undef | (v.a == np.iinfo(DTYPE[self.t]).min)
                return out
            if self.op == "~":
                return _wrap_list([~int(x) for x in v.a], self.t, v)
        raise AssertionError(self.op)


def _wrap_list(values, t, like: V) -> V:
    m = 1 << _bits(t)
    vals = [(x % m) - (m if t[0] == "i" and x % m >= m // 2 else 0) for x in values]
    return V(t, np.array(vals, dtype=object).astype(DTYPE[t]), like.undef.copy(),
             like.inexact.copy())


class Cast(Node):
    def __init__(self, operand, t):
        self.o, self.t = operand, t
        self.text = f"{t}({operand.text})"

    def eval(self, env):
        return convert(self.o.eval(env), self.t)


class Math(Node):
    def __init__(self, fn, operand, t, ft):
        self.fn, self.o, self.t, self.ft = fn, operand, t, ft
        self.text = f"math.{fn}({operand.text})"

    def eval(self, env):
        v = convert(self.o.eval(env), self.ft)
        with np.errstate(all="ignore"):
            r = _NP[self.fn](v.a.astype(np.float64))
        inexact = v.inexact | (self.fn not in ("fabs", "sqrt", "floor", "ceil", "trunc",
                                               "isnan", "isinf", "isfinite"))
        if self.t == "bool":
            return V("bool", np.asarray(r, bool), v.undef, inexact)
        if self.t == "i64":
            return convert(V("f64", np.asarray(r, np.float64), v.undef, inexact), "i64")
        with np.errstate(all="ignore"):
            return V(self.t, np.asarray(r).astype(DTYPE[self.t]), v.undef, inexact)


class MinMax(Node):
    def __init__(self, fn, a, b, t):
        self.fn, self.a, self.b, self.t = fn, a, b, t
        self.text = f"{fn}({a.text}, {b.text})"

    def eval(self, env):
        a, b = _operand(self.a, self.t, env), _operand(self.b, self.t, env)
        # documented: left to right, the later replaces only when strictly better
        better = (b.a < a.a) if self.fn == "min" else (b.a > a.a)
        return V(self.t, np.where(better, b.a, a.a).astype(DTYPE[self.t]),
                 a.undef | b.undef, a.inexact | b.inexact)


class IfExp(Node):
    def __init__(self, cond, a, b, t):
        self.c, self.a, self.b, self.t = cond, a, b, t
        self.text = f"({a.text} if {cond.text} else {b.text})"

    def eval(self, env):
        c = self.c.eval(env)
        a, b = _operand(self.a, self.t, env), _operand(self.b, self.t, env)
        pick = c.a != 0
        return V(self.t, np.where(pick, a.a, b.a).astype(DTYPE[self.t]),
                 c.undef | np.where(pick, a.undef, b.undef),
                 c.inexact | np.where(pick, a.inexact, b.inexact))


# -- the generator -------------------------------------------------------------------------

class Gen:
    def __init__(self, rng: random.Random, variables: dict):
        self.rng = rng
        self.vars = variables  # name -> type

    def leaf(self, want=None):
        rng = self.rng
        names = [n for n, t in self.vars.items() if want is None or t == want]
        if names and rng.random() < 0.8:
            n = rng.choice(names)
            return Var(n, self.vars[n])
        if want in FLOAT or (want is None and rng.random() < 0.4):
            return Lit(rng.choice([0.5, 2.0, -1.5, 3.0, 0.1, 1e30, -0.0, 7.25]))
        return Lit(rng.choice([0, 1, 2, 3, 7, -1, -3, 100, 255]))

    def expr(self, depth):
        rng = self.rng
        if depth <= 0 or rng.random() < 0.2:
            node = self.leaf()
            return node if not isinstance(node, Lit) else self.expr_typed(node)
        k = rng.random()
        if k < 0.45:
            return self.binary(depth)
        if k < 0.55:
            return self.unary(depth)
        if k < 0.65:
            t = rng.choice(TYPES)
            return Cast(self.expr(depth - 1), t)
        if k < 0.75:
            return self.math(depth)
        if k < 0.85:
            a, b = self.expr(depth - 1), self.expr(depth - 1)
            t = promote(a.t, b.t)
            if t is None or t == "bool":
                return a
            return MinMax(rng.choice(["min", "max"]), a, b, t)
        if k < 0.95:
            c = self.compare(depth - 1)
            a, b = self.expr(depth - 1), self.expr(depth - 1)
            t = promote(a.t, b.t)
            if t is None or (a.t == "bool") != (b.t == "bool"):
                return a  # documented: bools do not mix with numbers in one value
            return IfExp(c, a, b, t)
        return self.compare(depth - 1)

    def expr_typed(self, lit):
        # a bare literal as a whole operand: give it a type through a typed variable
        v = self.leaf()
        if isinstance(v, Lit):
            return Var(*next(iter(self.vars.items())))
        t = v.t
        op = self.rng.choice(["+", "-", "*"])
        ct = t if t != "bool" else "i64"
        if t in INT or t == "bool":
            if isinstance(lit.value, float):
                ct = "f64"
            else:
                info = np.iinfo(DTYPE[ct])
                if not info.min <= lit.value <= info.max:
                    return v
        return Bin(op, v, lit, ct, ct)

    def compare(self, depth):
        a, b = self.expr(depth), self.expr(depth)
        t = promote(a.t, b.t)
        if t is None:
            return Bin("==", a, a, "bool", a.t)
        return Bin(self.rng.choice(["<", "<=", ">", ">=", "==", "!="]), a, b, "bool", t)

    def binary(self, depth):
        rng = self.rng
        op = rng.choice(["+", "-", "*", "/", "//", "%", "**", "&", "|", "^", "<<", ">>"])
        a = self.expr(depth - 1)
        if op == "**":
            e = rng.choice([0, 1, 2, 3, 4, 5, -1, -2])
            b = Lit(e)
        elif op in ("<<", ">>"):
            if a.t not in INT:
                return a
            b0 = self.expr(depth - 1)
            if b0.t not in INT or promote(a.t, b0.t) is None:
                b = Lit(rng.randrange(_bits(a.t)))
            else:
                b = Bin("&", b0, Lit(_bits(promote(a.t, b0.t)) - 1), b0.t, b0.t)
        else:
            b = self.expr(depth - 1)
        t = self.result(op, a, b)
        if t is None:
            return a
        return t

    def result(self, op, a, b):
        at, bt = a.t, b.t
        if isinstance(b, Lit):
            if at == "bool":
                ct = "i64" if isinstance(b.value, int) else "f64"
            elif at in FLOAT:
                ct = at
            else:
                ct = at if isinstance(b.value, int) else "f64"
                if ct in INT:
                    info = np.iinfo(DTYPE[ct])
                    if not info.min <= b.value <= info.max:
                        return None
        else:
            ct = promote(at, bt)
            if ct is None:
                return None
        if op in ("&", "|", "^"):
            if ct in FLOAT:
                return None
            return Bin(op, a, b, ct, ct)
        if op in ("<<", ">>"):
            if ct not in INT:
                return None
            return Bin(op, a, b, ct, ct)
        if ct == "bool":
            ct = "i64"
        if op == "/":
            rt = ct if ct in FLOAT else "f64"
            return Bin(op, a, b, rt, rt)
        if op == "**":
            if ct in INT and isinstance(b, Lit) and b.value < 0 and ct[0] == "u":
                return None
            if ct in FLOAT and isinstance(b, Lit) and not 0 <= b.value <= 4:
                return Bin(op, a, b, ct, ct)
            return Pow(a, b, ct)
        return Bin(op, a, b, ct, ct)

    def unary(self, depth):
        a = self.expr(depth - 1)
        op = self.rng.choice(["-", "~", "not"])
        if op == "not":
            return Unary("not", a, "bool")
        if op == "~":
            if a.t not in INT:
                return a
            return Unary("~", a, a.t)
        return Unary("-", a, "i64" if a.t == "bool" else a.t)

    def math(self, depth):
        a = self.expr(depth - 1)
        ft = a.t if a.t in FLOAT else "f64"
        r = self.rng.random()
        if r < 0.6:
            return Math(self.rng.choice(MATH1), a, ft, ft)
        if r < 0.8:
            return Math(self.rng.choice(MATH_INT), a, "i64", ft)
        return Math(self.rng.choice(MATH_BOOL), a, "bool", ft)


class Pow(Node):
    """`a ** n` with a literal n: repeated multiplication for 0..4, else integer
    square-and-multiply (negative exponent: 0) or float pow."""
    def __init__(self, a, b, t):
        self.a, self.b, self.t = a, b, t
        self.text = f"({a.text} ** {b.text})"

    def eval(self, env):
        a = _operand(self.a, self.t, env)
        n = self.b.value
        if n == 0:
            return V(self.t, np.ones(N, DTYPE[self.t]), a.undef, a.inexact)
        if 1 <= n <= 4:
            r = a
            for _ in range(n - 1):
                r = binop("*", r, a, self.t, self.t)
            return r
        return binop("**", a, Lit(n).as_type(self.t), self.t, self.t)


# -- kernels ---------------------------------------------------------------------------------

INPUT_TYPES = ("i32", "i64", "u32", "u8", "f32", "f64", "bool", "u64", "i16")


@dataclass
class Case:
    name: str
    source: str
    inputs: list       # (name, type)
    out_t: str
    program: list      # statements for the reference: callables env -> None
    result: Node


def make_case(rng: random.Random, index: int) -> Case:
    count = rng.randint(2, 4)
    inputs = [(f"a{k}", rng.choice(INPUT_TYPES)) for k in range(count)]
    variables = dict(inputs)
    gen = Gen(rng, variables)
    lines = []
    program = []
    # control flow: locals from if/else, a counted loop, a while loop
    for s in range(rng.randint(0, 3)):
        kind = rng.choice(["let", "if", "for", "while"])
        name = f"v{s}"
        e = gen.expr(2)
        t = e.t if e.t != "bool" or kind == "let" else "i64"
        if kind == "let":
            lines.append(f"{name} = {e.text}")
            program.append(("let", name, e))
        elif kind == "if":
            c = gen.compare(1)
            e2 = gen.expr(2)
            lines += [f"{name}: {t} = 0", f"if {c.text}:", f"    {name} = {t}({e.text})",
                      "else:", f"    {name} = {t}({e2.text})"]
            program.append(("if", name, t, c, e, e2))
        elif kind == "for":
            k = rng.randint(1, 4)
            op = rng.choice(["+", "*", "^"]) if t in INT else rng.choice(["+", "*"])
            if t == "bool":
                t = "i64"
            gen.vars["j"] = "i64"
            body = gen.expr(1)
            del gen.vars["j"]
            lines += [f"{name}: {t} = 1", f"for j in range({k}):",
                      f"    {name} = {name} {op} {t}({body.text})"]
            program.append(("for", name, t, k, op, body))
        else:
            k = rng.randint(1, 3)
            if t == "bool":
                t = "i64"
            lines += [f"{name}: {t} = 0", "w = 0", f"while w < {k}:",
                      f"    {name} = {name} + {t}({e.text})", "    w += 1"]
            program.append(("while", name, t, k, e))
        variables[name] = t
    result = gen.expr(rng.randint(1, 4))
    out_t = result.t if result.t in TYPES else "i64"
    params = ", ".join(f"{n}: Array[{t}, 1]" for n, t in inputs)
    name = f"fuzz_{index}"
    body = "\n".join("        " + ln for ln in lines + [f"out[i] = {result.text}"])
    source = (f"@cupric.kernel(fma=False)\n"
              f"def {name}({params}, out: Array[{out_t}, 1]):\n"
              f"    i = grid(1)\n"
              f"    if i < out.size:\n"
              + _index_inputs(inputs) + body + "\n")
    return Case(name, source, inputs, out_t, program, result)


def _index_inputs(inputs) -> str:
    # Every input is read at the thread's index once, into a local of the same name.
    return "".join(f"        {n} = {n}_[i]\n" for n, _ in inputs)


def _fix_params(source: str, inputs) -> str:
    for n, _ in inputs:
        source = source.replace(f"{n}: Array[", f"{n}_: Array[", 1)
    return source


def reference(case: Case, arrays: dict) -> V:
    env = {n: V(t, arrays[n]) for n, t in case.inputs}
    for step in case.program:
        kind = step[0]
        if kind == "let":
            env[step[1]] = step[2].eval(env)
        elif kind == "if":
            _, name, t, c, e1, e2 = step
            cv = c.eval(env)
            a, b = convert(e1.eval(env), t), convert(e2.eval(env), t)
            pick = cv.a != 0
            env[name] = V(t, np.where(pick, a.a, b.a).astype(DTYPE[t]),
                          cv.undef | np.where(pick, a.undef, b.undef),
                          cv.inexact | np.where(pick, a.inexact, b.inexact))
        elif kind == "for":
            _, name, t, k, op, body = step
            acc = V(t, np.ones(N, DTYPE[t]))
            for j in range(k):
                env["j"] = V("i64", np.full(N, j, np.int64))
                acc = binop(op, acc, convert(body.eval(env), t), t, t)
            env.pop("j", None)
            env[name] = acc
        else:
            _, name, t, k, e = step
            acc = V(t, np.zeros(N, DTYPE[t]))
            for _ in range(k):
                acc = binop("+", acc, convert(e.eval(env), t), t, t)
            env[name] = acc
    node = case.result
    if isinstance(node, Lit):
        return node.as_type(case.out_t)
    return convert(node.eval(env), case.out_t)


def inputs_for(case: Case, rng: np.random.Generator) -> dict:
    out = {}
    for n, t in case.inputs:
        if t == "bool":
            out[n] = rng.random(N) < 0.5
        elif t in FLOAT:
            special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, 1e-30,
                                3.4e38, -2.5, 7.0])
            values = rng.standard_normal(N) * rng.choice([1.0, 10.0, 1000.0])
            pick = rng.random(N) < 0.2
            values[pick] = rng.choice(special, pick.sum())
            out[n] = values.astype(DTYPE[t])
        else:
            info = np.iinfo(DTYPE[t])
            small = rng.integers(-5 if t[0] == "i" else 0, 6, N)
            big = rng.integers(int(info.min), int(info.max), N, dtype=DTYPE[t],
                               endpoint=True)
            values = np.where(rng.random(N) < 0.5, small, big).astype(DTYPE[t])
            edges = np.array([info.min, info.max, 0, 1], dtype=DTYPE[t])
            pick = rng.random(N) < 0.1
            values[pick] = rng.choice(edges, pick.sum())
            out[n] = values
    return out


_HEADER = ("import math\nimport cupric\nfrom cupric.device import grid\n"
           "from cupric.types import *\n\n\n")


def build(cases: list[Case], tag: str):
    """Compile the cases' source into one module (registered with linecache, so that
    the compiler reads it like a file); returns {name: kernel}."""
    text = _HEADER + "\n\n".join(_fix_params(c.source, c.inputs) for c in cases)
    filename = f"<cupric-fuzz-{tag}>"
    lines = text.splitlines(True)
    linecache.cache[filename] = (len(text), None, lines, filename)
    namespace: dict = {"__name__": f"cupric_fuzz_{tag}"}
    exec(compile(text, filename, "exec"), namespace)
    return {c.name: namespace[c.name] for c in cases}


@dataclass
class Mismatch:
    case: Case
    index: int
    what: str
    got: object
    want: object

    def __str__(self):
        return (f"{self.case.name} element {self.index}: {self.what}: got {self.got!r}, "
                f"expected {self.want!r}\n{self.case.source}")


def compare(case: Case, got: np.ndarray, want: V, exact_inexact: bool,
            explained: list | None = None) -> list[Mismatch]:
    """Mismatches of `got` against the reference `want`. Inexact elements (a libdevice or
    NumPy transcendental flowed into them) within the relative tolerance pass; beyond it
    (an ulp difference amplified by cancellation, or deciding an integer) they go to
    `explained` rather than to the mismatches, unless `exact_inexact`."""
    out = []
    for k in range(N):
        if want.undef[k]:
            continue
        g, w = got[k], want.a[k]
        if case.out_t in FLOAT:
            if np.isnan(g) and np.isnan(w):
                continue
            if g == w and (g != 0 or np.signbit(g) == np.signbit(w)):
                continue
            if want.inexact[k] and not exact_inexact:
                if np.isfinite(g) and np.isfinite(w) and abs(g - w) <= 1e-5 * max(1, abs(w)):
                    continue
                if explained is not None:
                    explained.append(Mismatch(case, k, "inexact", g, w))
                continue
            out.append(Mismatch(case, k, "value", g, w))
        else:
            if g == w:
                continue
            if want.inexact[k] and not exact_inexact:
                if explained is not None:  # decided by the last bits of a libdevice result
                    explained.append(Mismatch(case, k, "inexact", g, w))
                continue
            out.append(Mismatch(case, k, "value", g, w))
    return out


def generate(count: int, seed: int) -> list[Case]:
    rng = random.Random(seed)
    return [make_case(rng, k) for k in range(count)]


def run(count: int, seed: int = 1, gpu: bool = False, batch: int = 50, log=None):
    """Fuzz `count` kernels; returns (kernels run, elements compared, mismatches,
    refused) where refused counts kernels the compiler refused (a generator bug: they
    are reported as mismatches too)."""
    from cupric.compiler.errors import CompileError
    cases = generate(count, seed)
    data_rng = np.random.default_rng(seed)
    mismatches, explained, compared, refused = [], [], 0, 0
    for start in range(0, count, batch):
        chunk = cases[start:start + batch]
        kernels = build(chunk, f"{seed}-{start}")
        for case in chunk:
            kern = kernels[case.name]
            arrays = inputs_for(case, data_rng)
            want = reference(case, arrays)
            args = [arrays[n] for n, _ in case.inputs]
            out = np.zeros(N, DTYPE[case.out_t])
            try:
                kern.simulate[1, N](*args, out)
            except CompileError as exc:
                refused += 1
                mismatches.append(Mismatch(case, -1, f"refused: {exc}", None, None))
                continue
            # Inexact values (transcendental functions) compare within a tolerance here
            # too: NumPy's vectorized pow/exp differ from its scalar ones in the last bit.
            found = compare(case, out, want, exact_inexact=False, explained=explained)
            compared += int((~want.undef).sum())
            for m in found:
                m.what = "simulator vs reference: " + m.what
            mismatches += found
            if gpu:
                from cupric.runtime import to_device
                dev_args = [to_device(a) for a in args]
                dev_out = to_device(_poison(case.out_t))
                kern[1, N](*dev_args, dev_out)
                got = dev_out.to_numpy()
                found = compare(case, got, want, exact_inexact=False, explained=explained)
                found += [Mismatch(case, k, "GPU vs simulator", got[k], out[k])
                          for k in range(N) if not want.undef[k] and not want.inexact[k]
                          and not _same(got[k], out[k])]
                for m in found:
                    m.what = "GPU: " + m.what
                mismatches += found
                for a in dev_args + [dev_out]:
                    a.close()
        if log is not None:
            log(f"{min(start + batch, count)}/{count} kernels, {len(mismatches)} mismatches")
    run.explained = explained
    return count, compared, mismatches, refused


def _poison(t):
    if t in FLOAT:
        return np.full(N, np.nan, DTYPE[t])
    if t == "bool":
        return np.ones(N, bool)
    return np.full(N, np.iinfo(DTYPE[t]).max // 3, DTYPE[t])


def _same(a, b) -> bool:
    if isinstance(a, (np.floating, float)) and np.isnan(a) and np.isnan(b):
        return True
    return a == b and (not isinstance(a, (np.floating, float)) or a != 0
                       or np.signbit(a) == np.signbit(b))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--gpu", action="store_true")
    parser.add_argument("--show", type=int, default=5)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    count, compared, mismatches, refused = run(args.count, args.seed, args.gpu,
                                               log=lambda s: print(s, flush=True))
    kernels_bad = sorted({m.case.name for m in mismatches}, key=lambda n: int(n[5:]))
    explained = run.explained
    print(f"fuzz: seed {args.seed}, {count} kernels ({'GPU + ' if args.gpu else ''}"
          f"simulator vs reference), {compared} elements compared, {len(mismatches)} "
          f"mismatches in {len(kernels_bad)} kernels, {len(explained)} explained "
          f"(libdevice ulps) in {len({m.case.name for m in explained})} kernels, "
          f"{refused} refused, {time.perf_counter() - t0:.0f} s")
    shown = set()
    for m in mismatches:
        if m.case.name in shown or len(shown) >= args.show:
            continue
        shown.add(m.case.name)
        print(m)
    for name in kernels_bad:
        first = next(m for m in mismatches if m.case.name == name)
        print(f"  {name}: element {first.index}: {first.what}: {first.got!r} vs {first.want!r}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())

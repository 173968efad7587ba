"""Device-side error records: a failing bounds check or `assert` in a compiled kernel
writes what failed (kernel, file:line, index, extent, block and thread) into page-locked
host memory mapped into the device, before `__assertfail` stops the kernel. A kernel
fault makes the CUDA context unusable, so nothing could be copied back from device
memory afterwards; host memory written by the device stays readable, and the runtime's
`DeviceAssertionError` carries the record (its `vprintf` line stays as a fallback).

Each compiled module holds `__cupric_error_record`, the host address of the record (an
i64, 0 until set), and a private claim word, so that only the first failing thread
writes. `install(module)` points a freshly loaded module at its context's record.

Record layout (64 little-endian i64 words): 0 magic, 1 kind (1 bounds, 2 assert),
2 line, 3 dimensions, 4-7 index, 8-11 extent, 12-14 block, 15-17 thread, 18 text
length, 19-63 text: kernel, file, array (or assert message), NUL-separated.
"""

from __future__ import annotations

import threading

import numpy as np

__all__ = ["RECORD_GLOBAL", "emit_record", "install", "read_record", "describe"]

RECORD_GLOBAL = "__cupric_error_record"
WORDS = 64
MAGIC = 0x4355505249430001  # "CUPRIC" + version 1
_TEXT_WORD = 19
_TEXT_BYTES = (WORDS - _TEXT_WORD) * 8
_MAX_DIMS = 4
KIND_BOUNDS = 1
KIND_ASSERT = 2


# -- code generation ---------------------------------------------------------------------

def _globals(cg):
    """The record-address global and the claim word of the module being compiled."""
    from cupric.compiler.ir import types as ll
    from cupric.compiler.ir.module import GlobalVariable, symbol
    from cupric.compiler.ir.values import Value
    from cupric.compiler.lowering.memory import module_state

    class _Record(GlobalVariable):
        def render(self) -> str:
            # Externally initialized: the host sets it after loading the module.
            return (f"{symbol(self.name)} = addrspace(1) externally_initialized global "
                    f"i64 0, align 8")

    def make():
        cg.mcg.module.add_global(_Record(RECORD_GLOBAL, ll.i64, ll.GLOBAL, "0", "", 8))
        claim = cg.mcg.module.unique_symbol("cupric_error_claim")
        cg.mcg.module.add_global(GlobalVariable(claim, ll.i32, ll.GLOBAL, "0", "internal", 4))
        return claim
    claim = module_state(cg, "error_record", make)
    return (Value(ll.PointerType(ll.i64, ll.GLOBAL), symbol(RECORD_GLOBAL)),
            Value(ll.PointerType(ll.i32, ll.GLOBAL), symbol(claim)))


def _text(kernel: str, filename: str, what: str) -> bytes:
    room = _TEXT_BYTES - len(kernel) - len(what) - 3
    if len(filename) > room:
        filename = "..." + filename[-max(room - 3, 0):]
    return f"{kernel}\0{filename}\0{what}".encode()[:_TEXT_BYTES]


def emit_record(cg, kind: int, node, what: str, index=(), extent=()) -> None:
    """Emit, at the builder's position (a failure block), the first failing thread's
    write of the record: `what` is the array's name (bounds) or the message (assert);
    `index` and `extent` are i64 IR values."""
    from cupric.compiler.ir import types as ll
    from cupric.compiler.ir.values import const_int
    from cupric.compiler.lowering.indices import read_sreg
    from cupric.compiler.lowering.sync import convergent_call

    b = cg.b
    record, claim = _globals(cg)
    address = b.load(record)
    have = b.icmp("ne", address, const_int(ll.i64, 0))
    write = cg.fn.append_block("error.record")
    done = cg.fn.append_block("error.recorded")
    b.cbranch(have, write, done)
    b.position_at_end(write)
    old = b.atomicrmw("xchg", claim, const_int(ll.i32, 1))
    first = b.icmp("eq", old, const_int(ll.i32, 0))
    store = cg.fn.append_block("error.store")
    b.cbranch(first, store, done)
    b.position_at_end(store)
    base = b.cast("inttoptr", address, ll.PointerType(ll.i64))

    def put(k: int, value) -> None:
        slot = b.gep(base, [const_int(ll.i64, k)])
        b.store(value, slot)

    line = getattr(node, "lineno", cg.src.tree.lineno)
    put(1, const_int(ll.i64, kind))
    put(2, const_int(ll.i64, line))
    index, extent = list(index)[:_MAX_DIMS], list(extent)[:_MAX_DIMS]
    put(3, const_int(ll.i64, len(index)))
    for k, v in enumerate(index):
        put(4 + k, v)
    for k, v in enumerate(extent):
        put(8 + k, v)
    for k, (reg, axis) in enumerate((r, a) for r in ("ctaid", "tid") for a in "xyz"):
        put(12 + k, b.cast("zext", read_sreg(cg, f"{reg}.{axis}"), ll.i64))
    text = _text(cg.mcg.module.name, cg.src.filename, what)  # the module is the kernel's
    put(18, const_int(ll.i64, len(text)))
    padded = text + b"\0" * (-len(text) % 8)
    for k in range(len(padded) // 8):
        word = int.from_bytes(padded[8 * k:8 * k + 8], "little", signed=True)
        put(_TEXT_WORD + k, const_int(ll.i64, word))
    # The fields reach host memory before the magic word says the record is complete.
    convergent_call(cg, "llvm.nvvm.membar.sys", ll.void, [], attributes="nounwind")
    put(0, const_int(ll.i64, MAGIC))
    convergent_call(cg, "llvm.nvvm.membar.sys", ll.void, [], attributes="nounwind")
    b.br(done)
    b.position_at_end(done)


# -- host side ---------------------------------------------------------------------------

_lock = threading.Lock()
_records: dict = {}   # context handle -> (device ordinal, PinnedBuffer of WORDS i64)
_registered = [False]


def _forget(ordinal: int) -> None:
    """After a context reset: the records made in the old context are gone with it."""
    with _lock:
        for key in [k for k, (o, _) in _records.items() if o == ordinal]:
            del _records[key]


def _record(module):
    from cupric.runtime.host import PinnedOptions, pinned_zeros
    from cupric.runtime.native import current_context_key
    key = current_context_key()
    with _lock:
        known = _records.get(key)
        if known is None:
            buf = pinned_zeros(WORDS, np.int64, PinnedOptions(device_map=True))
            known = _records[key] = (module.device.ordinal, buf)
        if not _registered[0]:
            from cupric.runtime import errors
            from cupric.runtime.context import on_reset
            errors.FAULT_EXPLAINERS.append(_explain)
            on_reset(_forget)
            _registered[0] = True
        return known[1]


def install(module, image=None) -> bool:
    """Point `module`'s error record (if it has one) at its context's mapped host record.
    Returns whether the module has one. With unified addressing (every 64-bit platform
    CUDA supports) the device address of mapped pinned memory is its host address.

    `image` (the PTX text or cubin the module was loaded from) lets a module without a
    record be told apart by its symbol names, without a driver query that fails: a
    failing `cuModuleGetGlobal` is an API error compute-sanitizer reports.

    Cost
    ----
    A substring search of the image, or one `cuModuleGetGlobal` per module load; for a
    module with a record, one 8-byte copy (and, once per context, a 512-byte page-locked
    allocation).
    """
    from cupric.runtime.errors import NotFoundError
    if image is not None:
        name = RECORD_GLOBAL if isinstance(image, str) else RECORD_GLOBAL.encode()
        if name not in image:
            return False
    try:
        module.get_global(RECORD_GLOBAL)
    except NotFoundError:
        return False
    buf = _record(module)
    module.write_global(RECORD_GLOBAL, np.int64(buf.ptr))
    return True


def read_record(words: np.ndarray) -> dict | None:
    """The fields of a written record (`words`: WORDS i64), or None when it is empty."""
    if int(words[0]) != MAGIC:
        return None
    ndim = int(words[3])
    length = int(words[18])
    raw = words[_TEXT_WORD:].tobytes()[:length]
    parts = raw.decode(errors="replace").split("\0") + ["", "", ""]
    return {"kind": "bounds" if int(words[1]) == KIND_BOUNDS else "assert",
            "kernel": parts[0], "filename": parts[1], "line": int(words[2]),
            "what": parts[2], "index": tuple(int(v) for v in words[4:4 + ndim]),
            "extent": tuple(int(v) for v in words[8:8 + ndim]),
            "block": tuple(int(v) for v in words[12:15]),
            "thread": tuple(int(v) for v in words[15:18])}


def describe(fields: dict) -> str:
    """The message of a failure record."""
    where = f"{fields['filename']}:{fields['line']}"
    who = f"(block {fields['block']}, thread {fields['thread']})"
    if fields["kind"] == "bounds":
        index = fields["index"]
        index = index[0] if len(index) == 1 else index
        return (f"kernel {fields['kernel']}: {where}: index {index} out of bounds for "
                f"array '{fields['what']}' of shape {fields['extent']} {who}")
    return f"kernel {fields['kernel']}: {where}: {fields['what']} {who}"


def _explain(code: int, error) -> None:
    """The runtime's fault hook: attach the first written record to `error`."""
    with _lock:
        buffers = [buf for _, buf in _records.values()]
    for buf in buffers:
        fields = read_record(buf.array)
        if fields is None:
            continue
        buf.array[:] = 0
        error.record = fields
        for name in ("kernel", "filename", "line", "index", "extent", "block", "thread"):
            setattr(error, name, fields[name])
        error.message = f"{describe(fields)}; {error.message}" if error.message else \
            describe(fields)
        error.args = (error._render(),)
        return

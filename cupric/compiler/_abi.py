"""cupric's own bindings of libNVVM and nvJitLink: the dozen C calls the compile path makes.

Both libraries work on a handle: a libNVVM *program* collects NVVM IR modules and compiles
them to PTX; an nvJitLink *handle* collects PTX (or cubin) and links it into a cubin. Each
returns a status code from every call and keeps a log that says what went wrong.

The declarations are written from NVIDIA's documented C API (nvvm.h here, nvJitLink.h in
`cupric.runtime.linker`, cupric's one nvJitLink binding, whose classes this module
re-exports for the compile path) and compiled once by cffi into `cupric/_toolchain_ffi.py`
(out-of-line ABI mode, regenerated with ``python -m cupric.compiler._abi``). Importing that
module costs about a millisecond, where `cuda.pathfinder` plus `cuda.bindings` cost about 30
ms and cffi's own C parser (inline ``ffi.cdef``) about 27 ms: a cold kernel compile pays
neither. The calls go through libffi and release the GIL.
"""

from __future__ import annotations

from typing import Sequence

# The nvJitLink half lives in the runtime (one binding for the runtime's Linker and the
# compile path); re-exported here for the compiler's modules.
from cupric.runtime.linker import (NVJITLINK_DECLARATIONS, NVJITLINK_INPUT_CUBIN,
                                   NVJITLINK_INPUT_PTX, NVJITLINK_RESULTS, BoxedHandle,
                                   LibraryCallError, NvJitLink, NvJitLinkHandle)

__all__ = [
    "DECLARATIONS", "LibraryCallError", "Nvvm", "NvvmProgram", "NvJitLink", "NvJitLinkHandle",
    "NVJITLINK_INPUT_CUBIN", "NVJITLINK_INPUT_PTX", "NVJITLINK_RESULTS", "generate", "preload",
]

NVVM_DECLARATIONS = """
typedef int nvvmResult;
typedef struct _nvvmProgram *nvvmProgram;
const char *nvvmGetErrorString(nvvmResult result);
nvvmResult nvvmVersion(int *major, int *minor);
nvvmResult nvvmIRVersion(int *majorIR, int *minorIR, int *majorDbg, int *minorDbg);
nvvmResult nvvmCreateProgram(nvvmProgram *prog);
nvvmResult nvvmDestroyProgram(nvvmProgram *prog);
nvvmResult nvvmAddModuleToProgram(nvvmProgram prog, const char *buffer, size_t size,
                                  const char *name);
nvvmResult nvvmLazyAddModuleToProgram(nvvmProgram prog, const char *buffer, size_t size,
                                      const char *name);
nvvmResult nvvmVerifyProgram(nvvmProgram prog, int numOptions, const char **options);
nvvmResult nvvmCompileProgram(nvvmProgram prog, int numOptions, const char **options);
nvvmResult nvvmGetCompiledResultSize(nvvmProgram prog, size_t *bufferSizeRet);
nvvmResult nvvmGetCompiledResult(nvvmProgram prog, char *buffer);
nvvmResult nvvmGetProgramLogSize(nvvmProgram prog, size_t *bufferSizeRet);
nvvmResult nvvmGetProgramLog(nvvmProgram prog, char *buffer);
"""

# The dynamic loader, called through an ABI-mode call so that the GIL is released while it
# maps a library (see `preload`).
LOADER_DECLARATIONS = """
void *dlopen(const char *filename, int flags);
char *dlerror(void);
"""

DECLARATIONS = NVVM_DECLARATIONS + NVJITLINK_DECLARATIONS + LOADER_DECLARATIONS

#: nvvmResult codes, in order (nvvm.h).
NVVM_RESULTS = (
    "NVVM_SUCCESS", "NVVM_ERROR_OUT_OF_MEMORY", "NVVM_ERROR_PROGRAM_CREATION_FAILURE",
    "NVVM_ERROR_IR_VERSION_MISMATCH", "NVVM_ERROR_INVALID_INPUT", "NVVM_ERROR_INVALID_PROGRAM",
    "NVVM_ERROR_INVALID_IR", "NVVM_ERROR_INVALID_OPTION", "NVVM_ERROR_NO_MODULE_IN_PROGRAM",
    "NVVM_ERROR_COMPILATION", "NVVM_ERROR_CANCELLED",
)
def _ffi():
    from cupric._toolchain_ffi import ffi

    return ffi


_loader: list = []  # (dlopen, dlerror) from the process's own symbols, looked up once


def preload(path: str) -> None:
    """Load the shared library at `path` into the process with the GIL released.

    cffi's ``ffi.dlopen`` holds the GIL while the dynamic loader maps and relocates a
    library (milliseconds for libNVVM's 70 MB and nvJitLink's 120 MB), which would stall
    the thread that types a kernel beside a loader thread. Calling the C library's
    ``dlopen`` through an ABI-mode call releases the GIL instead; the `Nvvm`/`NvJitLink`
    that opens the same path afterwards finds it loaded. The library stays loaded for the
    life of the process (as every toolchain library does).

    Raises
    ------
    OSError
        The dynamic loader refused the file (its message).
    """
    import os

    ffi = _ffi()
    if not _loader:
        process = ffi.dlopen(None)
        # Both looked up before the call: a lookup (dlsym) clears dlopen's error message.
        _loader[:] = [process.dlopen, process.dlerror]
    dlopen, dlerror = _loader
    if dlopen(os.fsencode(path), os.RTLD_NOW) == ffi.NULL:
        message = dlerror()
        detail = ffi.string(message).decode("utf-8", "replace") if message != ffi.NULL else ""
        raise OSError(f"cannot load library {path!r}: {detail}")


def _check(status: int, function: str, names: Sequence[str]) -> None:
    if status != 0:
        raise LibraryCallError(function, status, names)


def _option_array(ffi, options: Sequence[str]):
    """(``const char **`` or NULL, the buffers that must outlive the call)."""
    if not options:
        return ffi.NULL, ()
    buffers = [ffi.new("char[]", option.encode("utf-8")) for option in options]
    return ffi.new("const char *[]", buffers), buffers


def _read_text(ffi, size: int, fill) -> str:
    """Read a NUL-terminated text the library sizes (size includes the NUL) and fills."""
    if size <= 0:
        return ""
    buffer = ffi.new("char[]", size)
    fill(buffer)
    return ffi.string(buffer, size).decode("utf-8", "replace")


class Nvvm:
    """libNVVM opened from a file.

    Parameters
    ----------
    path : str
        The shared library (``libnvvm.so.4``).

    Raises
    ------
    OSError
        The file cannot be loaded (missing, wrong architecture, unresolved dependencies).

    Thread safety
    -------------
    Safe: libNVVM is thread-safe across programs; each `NvvmProgram` is used by one thread.
    """

    def __init__(self, path: str) -> None:
        self.ffi = _ffi()
        self.path = path
        self.lib = self.ffi.dlopen(path)

    def version(self) -> tuple[int, int]:
        """The libNVVM API version, ``(2, 0)`` for every CUDA 12/13 release."""
        major, minor = self.ffi.new("int *"), self.ffi.new("int *")
        _check(self.lib.nvvmVersion(major, minor), "nvvmVersion", NVVM_RESULTS)
        return major[0], minor[0]

    def ir_version(self) -> tuple[int, int, int, int]:
        """``(ir_major, ir_minor, debug_major, debug_minor)``: the NVVM IR and debug
        metadata versions this libNVVM reads."""
        values = [self.ffi.new("int *") for _ in range(4)]
        _check(self.lib.nvvmIRVersion(*values), "nvvmIRVersion", NVVM_RESULTS)
        return tuple(v[0] for v in values)

    def program(self) -> NvvmProgram:
        """A new, empty program; use it in a ``with`` block (destroyed at its end)."""
        return NvvmProgram(self)


class NvvmProgram(BoxedHandle):
    """One libNVVM program: modules in, PTX and a log out.

    Destroyed by `close()` or at the end of a ``with`` block; each method raises
    `LibraryCallError` on an error status (read `log()` for libNVVM's messages).
    """

    __slots__ = ()
    _what = "libNVVM program"

    def __init__(self, nvvm: Nvvm) -> None:
        self._ffi, self._lib = nvvm.ffi, nvvm.lib
        box = self._ffi.new("nvvmProgram *")
        _check(self._lib.nvvmCreateProgram(box), "nvvmCreateProgram", NVVM_RESULTS)
        self._box = box

    def add_module(self, data: bytes, name: str, *, lazy: bool = False) -> None:
        """Add IR text or bitcode; ``lazy`` links in only what other modules use
        (libdevice)."""
        function = "nvvmLazyAddModuleToProgram" if lazy else "nvvmAddModuleToProgram"
        status = getattr(self._lib, function)(self._handle, data, len(data),
                                             name.encode("utf-8"))
        _check(status, function, NVVM_RESULTS)

    def verify(self, options: Sequence[str]) -> None:
        array, keep = _option_array(self._ffi, options)
        _check(self._lib.nvvmVerifyProgram(self._handle, len(options), array),
               "nvvmVerifyProgram", NVVM_RESULTS)
        del keep

    def compile(self, options: Sequence[str]) -> None:
        array, keep = _option_array(self._ffi, options)
        _check(self._lib.nvvmCompileProgram(self._handle, len(options), array),
               "nvvmCompileProgram", NVVM_RESULTS)
        del keep

    def result(self) -> str:
        """The PTX of the last successful `compile`."""
        size = self._ffi.new("size_t *")
        _check(self._lib.nvvmGetCompiledResultSize(self._handle, size),
               "nvvmGetCompiledResultSize", NVVM_RESULTS)
        return _read_text(self._ffi, size[0], self._fill("nvvmGetCompiledResult"))

    def log(self) -> str:
        """The program log (errors and warnings of the last verify/compile)."""
        size = self._ffi.new("size_t *")
        _check(self._lib.nvvmGetProgramLogSize(self._handle, size), "nvvmGetProgramLogSize",
               NVVM_RESULTS)
        return _read_text(self._ffi, size[0], self._fill("nvvmGetProgramLog"))

    def _fill(self, function: str):
        def fill(buffer) -> None:
            _check(getattr(self._lib, function)(self._handle, buffer), function, NVVM_RESULTS)
        return fill

    def close(self) -> None:
        """Destroy the program (again: nothing)."""
        if self._box[0] != self._ffi.NULL:
            _check(self._lib.nvvmDestroyProgram(self._box), "nvvmDestroyProgram", NVVM_RESULTS)


# -- the generated module ----------------------------------------------------------------------

_GENERATED = "cupric/_toolchain_ffi.py"


def declarations_digest() -> str:
    """blake2b of `DECLARATIONS`: the generated module records the one it was made from."""
    import hashlib

    return hashlib.blake2b(DECLARATIONS.encode("utf-8"), digest_size=12).hexdigest()


def generate() -> str:
    """The text of `_toolchain_ffi.py`: `DECLARATIONS` compiled by cffi (out-of-line ABI
    mode; needs cffi and pycparser, which only this step imports)."""
    import os
    import tempfile

    import cffi

    builder = cffi.FFI()
    builder.cdef(DECLARATIONS)
    builder.set_source("cupric._toolchain_ffi", None)
    with tempfile.TemporaryDirectory(prefix="cupric-ffi-") as folder:
        target = os.path.join(folder, "module.py")
        builder.emit_python_code(target)
        with open(target, encoding="utf-8") as file:
            code = file.read()
    header = (f"# Generated by `python -m cupric.compiler._abi` from the declarations in\n"
              f"# cupric/compiler/_abi.py and cupric/runtime/linker.py; do not edit.\n"
              f"# Regenerate after changing them.\n"
              f"# cffi {cffi.__version__}, out-of-line ABI mode.\n")
    return header + code + f"\nDECLARATIONS_DIGEST = {declarations_digest()!r}\n"


def _main() -> None:
    import os

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.path.join(root, _GENERATED)
    with open(path, "w", encoding="utf-8") as file:
        file.write(generate())
    print(f"wrote {path}")


if __name__ == "__main__":
    _main()

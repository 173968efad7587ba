"""A minimal fake C library, enough for pycparser to parse the CUDA libraries' headers.

The generator never uses the system's libc headers: they are full of compiler extensions
pycparser cannot read, and they differ between machines, which would break
byte-for-byte reproducible output. The CUDA headers only need the standard type names
and a few limits. Declarations that come from these files are dropped after parsing;
cffi knows every type named here as a built-in, with the platform's real size.
"""

from __future__ import annotations

import atexit
import hashlib
import shutil
import threading
from pathlib import Path

_lock = threading.Lock()

# Typedefs are the LP64 (Linux x86-64 and aarch64) ones, so that constant folding of
# `sizeof(size_t)` and friends gives the sizes the C compiler would.
_INTEGER_TYPES = """\
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long uint64_t;
typedef signed char int_least8_t;
typedef short int_least16_t;
typedef int int_least32_t;
typedef long int_least64_t;
typedef unsigned char uint_least8_t;
typedef unsigned short uint_least16_t;
typedef unsigned int uint_least32_t;
typedef unsigned long uint_least64_t;
typedef signed char int_fast8_t;
typedef long int_fast16_t;
typedef long int_fast32_t;
typedef long int_fast64_t;
typedef unsigned char uint_fast8_t;
typedef unsigned long uint_fast16_t;
typedef unsigned long uint_fast32_t;
typedef unsigned long uint_fast64_t;
typedef long intptr_t;
typedef unsigned long uintptr_t;
typedef long intmax_t;
typedef unsigned long uintmax_t;
"""

_STDDEF = """\
typedef unsigned long size_t;
typedef long ssize_t;
typedef long ptrdiff_t;
typedef int wchar_t;
#define NULL ((void*)0)
#define offsetof(type, member) __builtin_offsetof(type, member)
"""

_LIMITS = """\
#define CHAR_BIT 8
#define SCHAR_MIN (-128)
#define SCHAR_MAX 127
#define UCHAR_MAX 255
#define CHAR_MIN SCHAR_MIN
#define CHAR_MAX SCHAR_MAX
#define SHRT_MIN (-32768)
#define SHRT_MAX 32767
#define USHRT_MAX 65535
#define INT_MIN (-INT_MAX - 1)
#define INT_MAX 2147483647
#define UINT_MAX 4294967295U
#define LONG_MAX 9223372036854775807L
#define LONG_MIN (-LONG_MAX - 1L)
#define ULONG_MAX 18446744073709551615UL
#define LLONG_MAX 9223372036854775807LL
#define LLONG_MIN (-LLONG_MAX - 1LL)
#define ULLONG_MAX 18446744073709551615ULL
"""

_STDINT_LIMITS = """\
#define INT8_MIN (-128)
#define INT8_MAX 127
#define UINT8_MAX 255
#define INT16_MIN (-32768)
#define INT16_MAX 32767
#define UINT16_MAX 65535
#define INT32_MIN (-INT32_MAX - 1)
#define INT32_MAX 2147483647
#define UINT32_MAX 4294967295U
#define INT64_MIN (-INT64_MAX - 1L)
#define INT64_MAX 9223372036854775807L
#define UINT64_MAX 18446744073709551615UL
#define SIZE_MAX UINT64_MAX
#define INT8_C(c) c
#define INT16_C(c) c
#define INT32_C(c) c
#define INT64_C(c) c ## L
#define UINT8_C(c) c
#define UINT16_C(c) c
#define UINT32_C(c) c ## U
#define UINT64_C(c) c ## UL
"""

# One entry per header the CUDA headers include. Guards make repeated inclusion harmless.
FILES: dict[str, str] = {
    "stddef.h": "#ifndef _FAKE_STDDEF_H\n#define _FAKE_STDDEF_H\n" + _STDDEF + "#endif\n",
    "stdint.h": "#ifndef _FAKE_STDINT_H\n#define _FAKE_STDINT_H\n#include <stddef.h>\n"
    + _INTEGER_TYPES + _STDINT_LIMITS + "#endif\n",
    "inttypes.h": "#include <stdint.h>\n",
    "limits.h": "#ifndef _FAKE_LIMITS_H\n#define _FAKE_LIMITS_H\n" + _LIMITS + "#endif\n",
    "stdbool.h": "#ifndef _FAKE_STDBOOL_H\n#define _FAKE_STDBOOL_H\n"
    "#define bool _Bool\n#define true 1\n#define false 0\n#endif\n",
    "stdio.h": "#ifndef _FAKE_STDIO_H\n#define _FAKE_STDIO_H\n#include <stddef.h>\n"
    "typedef struct _IO_FILE FILE;\n#endif\n",
    "stdlib.h": "#include <stddef.h>\n",
    "string.h": "#include <stddef.h>\n",
    "stdarg.h": "#ifndef _FAKE_STDARG_H\n#define _FAKE_STDARG_H\n"
    "typedef struct __va_list_opaque *va_list;\n#endif\n",
    "math.h": "",
    "float.h": "",
    "time.h": "#include <stddef.h>\n",
    "ctype.h": "",
    "assert.h": "",
    "memory.h": "#include <stddef.h>\n",
}

# A stand-in for the CUDA toolkit's crt/host_defines.h and crt/host_config.h, used only
# when no real copy is installed: since CUDA 13 they come in a separate wheel
# (nvidia-cuda-crt) that an environment may lack, while the runtime headers include
# them. For a C host build they only define function and storage qualifiers (all empty
# for a host binding) and the alignment macros, which must keep their meaning.
CRT_STANDIN: dict[str, str] = {
    "crt/host_defines.h": "#ifndef __HOST_DEFINES_H__\n#define __HOST_DEFINES_H__\n"
    + "".join(
        f"#define {name}\n"
        for name in (
            "__no_return__", "__noinline__", "__inline_hint__", "__thread__", "__import__",
            "__export__", "__cdecl", "__annotate__(a)", "__location__(a)", "CUDARTAPI",
            "CUDARTAPI_CDECL", "__specialization_static", "__host__", "__device__",
            "__global__", "__shared__", "__constant__", "__managed__", "__tile__",
            "__tile_builtin__", "__tile_global__", "__launch_bounds__(...)",
            "__cluster_dims__(...)", "__block_size__(...)", "__maxnreg__(a)",
            "__local_maxnreg__(a)", "__grid_constant__", "__nv_pure__", "__device_builtin__",
            "__device_builtin_texture_type__", "__device_builtin_surface_type__",
            "__cudart_builtin__", "__NV_TL__", "__NV_TL_BUILTIN__",
            "__experimental_foreign_decl__", "__experimental_foreign_name__(x)",
        )
    )
    + "#define __forceinline__ inline\n"
    + "#define __align__(n) __attribute__((aligned(n)))\n"
    + "#define __builtin_align__(a) __attribute__((aligned(a)))\n"
    + "#endif\n",
    "crt/host_config.h": "#ifndef __HOST_CONFIG_H__\n#define __HOST_CONFIG_H__\n#endif\n",
}

# Names the fake libc defines that cffi knows natively; declarations using them stay valid.
CFFI_BUILTIN_TYPES = frozenset(
    line.split()[-1].rstrip(";")
    for line in (_INTEGER_TYPES + _STDDEF).splitlines()
    if line.startswith("typedef")
) | {"FILE", "_Bool"}


def digest() -> str:
    """A hash of the fake libc's text; part of the generator's identity."""
    h = hashlib.sha256()
    for files in (FILES, CRT_STANDIN):
        for name in sorted(files):
            h.update(name.encode() + b"\0" + files[name].encode() + b"\0")
    return h.hexdigest()


_temporary: dict[str, str] = {}  # kind -> private temporary folder of this process


def materialize(kind: str = "libc") -> str:
    """Write the fake libc (or the crt stand-in, ``kind="crt"``) into a private folder
    and return its path.

    Both preprocessor backends read headers from disk, so the files must exist. They live
    in ``<cache root>/fakelibc/<kind>-<digest>`` (checked like every cache folder: this
    user's, mode 0700), and every file is compared with the text above on each call, so
    a changed or planted header is rewritten before the preprocessor reads it. When the
    cache cannot be written, a private temporary folder of this process holds them.

    Raises
    ------
    PermissionError
        The cache folder belongs to another user.
    """
    from .. import _cache

    files = FILES if kind == "libc" else CRT_STANDIN
    root = _cache.folder("fakelibc")
    if root is not None:
        directory = root / f"fake{kind}-{digest()[:16]}"
        if _write_files(directory, root, files):
            return str(directory)
    with _lock:
        directory = _temporary.get(kind)
        if directory is None:
            directory = _temporary[kind] = _cache.private_tempdir(f"cupric-fake{kind}-")
            atexit.register(shutil.rmtree, directory, True)
    if not _write_files(Path(directory), Path(directory), files):
        raise OSError(f"cannot write the fake libc headers into {directory}")
    return directory


def _write_files(directory: Path, top: Path, files: dict[str, str]) -> bool:
    """Make `directory` hold exactly the expected text of each of `files`; False when it
    cannot be written."""
    from .. import _cache

    for name, text in files.items():
        path = directory / name
        expected = text.encode("ascii")
        if _cache.read_trusted(path, limit=1 << 20) == expected:
            continue
        if _cache.secure_folder(path.parent, top) is None:
            return False
        if not _cache.write_atomic(path, expected):
            return False
    return True

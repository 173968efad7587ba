"""What the generator knows about each CUDA library: headers, shared object, package.

One `LibrarySpec` per library. Adding a library means adding an entry here and a
loader module beside its high-level package; nothing else in the generator is
library-specific.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass


@dataclass(frozen=True)
class LibrarySpec:
    """A CUDA library the generator can bind.

    Attributes
    ----------
    name : str
        Short name used on the command line and in the cache (``"cublas"``).
    top_header : str
        The header a C program would include.
    own_headers : tuple of str
        Glob patterns (relative to an include directory) of the library's own headers:
        their declarations are kept; other headers only contribute the types these need.
    header_key : str
        The name `cuda.pathfinder.locate_nvidia_header_directory` knows the headers by.
    needs_cudart_headers : bool
        Whether the headers include ``cuda_runtime*.h``, which live in another wheel.
    shared_library : str
        The shared object's base name (``"cublas"`` for ``libcublas.so.*``).
    package : str
        The pip package that carries headers and shared object.
    version_macros : tuple of str
        Macros giving (major, minor, patch) of the library.
    status_type : str
        The typedef of the library's status enum, or "" where there is none.
    root_variable : str
        For libraries not in the wheels: the environment variable naming an SDK root
        whose ``include`` directory holds the headers (``OPTIX_ROOT``).
    """

    name: str
    top_header: str
    own_headers: tuple[str, ...]
    header_key: str
    needs_cudart_headers: bool
    shared_library: str
    package: str
    version_macros: tuple[str, ...]
    status_type: str = ""
    root_variable: str = ""

    def owns(self, label: str) -> bool:
        """Whether a header label (path relative to its include directory) is the library's own."""
        return any(fnmatch.fnmatchcase(label, pattern) for pattern in self.own_headers)


LIBRARIES: dict[str, LibrarySpec] = {
    spec.name: spec
    for spec in (
        LibrarySpec(
            name="cublas",
            top_header="cublas_v2.h",
            own_headers=("cublas_v2.h", "cublas_api.h"),
            header_key="cublas",
            needs_cudart_headers=False,
            shared_library="cublas",
            package="nvidia-cublas",
            version_macros=("CUBLAS_VER_MAJOR", "CUBLAS_VER_MINOR", "CUBLAS_VER_PATCH"),
            status_type="cublasStatus_t",
        ),
        LibrarySpec(
            name="cublaslt",
            top_header="cublasLt.h",
            own_headers=("cublasLt.h",),
            header_key="cublas",
            needs_cudart_headers=False,
            shared_library="cublasLt",
            package="nvidia-cublas",
            version_macros=("CUBLAS_VER_MAJOR", "CUBLAS_VER_MINOR", "CUBLAS_VER_PATCH"),
            status_type="cublasStatus_t",
        ),
        LibrarySpec(
            name="curand",
            top_header="curand.h",
            own_headers=("curand.h",),
            header_key="curand",
            needs_cudart_headers=True,
            shared_library="curand",
            package="nvidia-curand",
            version_macros=("CURAND_VER_MAJOR", "CURAND_VER_MINOR", "CURAND_VER_PATCH"),
            status_type="curandStatus_t",
        ),
        LibrarySpec(
            name="cudnn",
            top_header="cudnn.h",
            own_headers=("cudnn*.h",),
            header_key="cudnn",
            needs_cudart_headers=True,
            shared_library="cudnn",
            package="nvidia-cudnn-cu13",
            version_macros=("CUDNN_MAJOR", "CUDNN_MINOR", "CUDNN_PATCHLEVEL"),
            status_type="cudnnStatus_t",
        ),
        LibrarySpec(
            # The OptiX SDK headers, when the user has them; without them cupric.optix
            # uses its own declarations. The runtime is libnvoptix from the driver.
            name="optix",
            top_header="optix_function_table.h",
            own_headers=("optix*.h", "internal/optix*.h"),
            header_key="",
            needs_cudart_headers=False,
            shared_library="nvoptix",
            package="the OptiX SDK (set OPTIX_ROOT)",
            version_macros=("OPTIX_VERSION",),
            status_type="OptixResult",
            root_variable="OPTIX_ROOT",
        ),
        LibrarySpec(
            name="nccl",
            top_header="nccl.h",
            own_headers=("nccl.h",),
            header_key="nccl",
            needs_cudart_headers=True,
            shared_library="nccl",
            package="nvidia-nccl-cu13",
            version_macros=("NCCL_MAJOR", "NCCL_MINOR", "NCCL_PATCH"),
            status_type="ncclResult_t",
        ),
    )
}


def get(name: str) -> LibrarySpec:
    """The spec of a library by short name (case-insensitive).

    Raises
    ------
    KeyError
        For a name the generator does not know, listing the known ones.
    """
    try:
        return LIBRARIES[name.lower()]
    except KeyError:
        raise KeyError(f"unknown library {name!r}; known: {', '.join(LIBRARIES)}") from None

"""Every ``CUPRIC_*`` environment variable, declared and read in one place.

A process's environment configures cupric: where caches live, whether the CPU simulator
runs kernels, which compiled fast paths load. Each variable is a `Setting` here (name,
type, default, what it does, when it is read); modules ask this module and never read
the environment themselves, and docs/configuration.md is generated from `SETTINGS`
(a CPU test keeps the two equal: ``python3 -m cupric._config`` prints the table).

When a setting is read decides when a change takes effect: "each use" settings are read
again every time they are consulted (tests and users may change them at run time);
"first use" settings are read once, when the part they configure first loads, and a
later change does nothing in that process.

Variables that are not cupric's own (``XDG_CACHE_HOME``, ``CUDA_HOME``, ``OPTIX_ROOT``,
the launchers' ``RANK``/``WORLD_SIZE``...) are read where they are used; they are named
in the table's descriptions where cupric follows them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

__all__ = ["Setting", "SETTINGS", "setting", "simulator_requested", "markdown_table",
           "SIMULATOR", "SIMULATOR_ENGINE", "SIMULATOR_TIMEOUT", "SIMULATOR_MAX_THREADS",
           "CACHE_DIR", "BINDINGS_DIR", "BUILD_LAUNCHER", "BUILD_SYNC", "BUILD_JOBS",
           "LAUNCH_BACKEND", "FAST_ALLOC", "ALLOC_CACHE",
           "KERNEL_FASTCALL",
           "CUBLAS_FASTPATH", "CUDNN_FASTPATH", "CUDNN_ENGINE_CACHE", "CPP", "STORE",
           "STORE_PATH"]

_environ = os.environ


def _on_unless_zero(text: str | None) -> bool:
    # Switches that are on by default: only "0" turns them off ("" keeps them on).
    return text != "0"


def _on_unless_empty_or_zero(text: str | None) -> bool:
    # Switches that are off by default: any value but "" and "0" turns them on.
    return text not in (None, "", "0")


def _text_or_none(text: str | None) -> str | None:
    return text or None


def _float(text: str | None) -> float | None:
    return None if text is None else float(text)


def _int(text: str | None) -> int | None:
    return None if text is None else int(text)


def _lower_or_none(text: str | None) -> str | None:
    return (text or "").strip().lower() or None


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, type, default, meaning and when it is read.

    Parameters
    ----------
    name : str
        The variable (``CUPRIC_...``).
    type : str
        What the value is, in words ("switch", "path", "float", ...).
    default : str
        What applies when the variable is unset, in words.
    doc : str
        What it does (one or two sentences; the docs table shows it).
    read : {"each use", "first use"}
        When cupric reads it (see the module docstring).
    parse : callable
        ``parse(text or None)``: the typed value (None when unset, for optional ones).
    """

    name: str
    type: str
    default: str
    doc: str
    read: str
    parse: Callable[[str | None], object]

    def __post_init__(self) -> None:
        if self.read not in ("each use", "first use"):
            raise ValueError(f"{self.name}: read must be 'each use' or 'first use'")

    def raw(self, environ=None) -> str | None:
        """The variable's text in `environ` (default: the process environment), or None."""
        return (os.environ if environ is None else environ).get(self.name)

    def get(self, environ=None):
        """The typed value from `environ` (default: the process environment).

        Raises
        ------
        ValueError
            When the text is not of the setting's type (a float or int setting).
        """
        text = self.raw(environ)
        try:
            return self.parse(text)
        except ValueError:
            raise ValueError(f"{self.name}={text!r} is not a valid {self.type}") from None


SIMULATOR = Setting(
    "CUPRIC_SIMULATOR", "switch", "off (kernels run on the GPU when a driver is found)",
    "Any value but empty or 0 runs every kernel launch on the CPU simulator, GPU or not, "
    "and silences the notice printed when no GPU is found.", "each use",
    _on_unless_empty_or_zero)
SIMULATOR_ENGINE = Setting(
    "CUPRIC_SIMULATOR_ENGINE", "auto | threads | generators", "auto",
    "How the simulator runs a block's threads: rewritten into generators (one OS thread "
    "per block) where it can, else OS threads; `threads` or `generators` forces one.",
    "each use", lambda text: "auto" if text is None else text)
SIMULATOR_TIMEOUT = Setting(
    "CUPRIC_SIMULATOR_TIMEOUT", "float (seconds)", "60",
    "How long a simulated block may wait at a barrier or spin before the simulator "
    "reports a deadlock.", "each use", lambda text: _float(text if text is not None else "60"))
SIMULATOR_MAX_THREADS = Setting(
    "CUPRIC_SIMULATOR_MAX_THREADS", "int", "the engine's own limit",
    "The most simulated threads a kernel that calls grid_sync may need at once (all of "
    "its grid runs together).", "each use", _int)
CACHE_DIR = Setting(
    "CUPRIC_CACHE_DIR", "path", "$XDG_CACHE_HOME/cupric, else ~/.cache/cupric",
    "The root of every cupric cache: compiled kernels, built extensions, generated "
    "library bindings.", "each use", _text_or_none)
BINDINGS_DIR = Setting(
    "CUPRIC_BINDINGS_DIR", "path", "$CUPRIC_CACHE_DIR/bindings",
    "Where generated library bindings (cuBLAS, cuDNN, cuRAND, NCCL, OptiX...) are "
    "written and loaded from.", "each use", _text_or_none)
BUILD_LAUNCHER = Setting(
    "CUPRIC_BUILD_LAUNCHER", "switch", "on",
    "0 stops cupric from compiling its C extensions (launch, allocation, cuBLAS and "
    "cuDNN fast paths); ones already in the cache still load, the rest fall back to the "
    "Python paths.", "first use", _on_unless_zero)
BUILD_SYNC = Setting(
    "CUPRIC_BUILD_SYNC", "switch", "off",
    "1 builds a missing C extension in the calling thread when it is first needed, one "
    "at a time; by default every missing fast path is built in background threads "
    "(`CUPRIC_BUILD_JOBS` compilers at once) while the Python paths run.", "each use", _on_unless_empty_or_zero)
BUILD_JOBS = Setting(
    "CUPRIC_BUILD_JOBS", "int", "one fewer than the CPUs the process may use (at least 1)",
    "How many C compilers the background builds of the fast-path extensions run at once; "
    "a build that a caller waits for goes first.", "each use", _int)
LAUNCH_BACKEND = Setting(
    "CUPRIC_LAUNCH_BACKEND", "name of a launch backend", "the fastest available",
    "Forces the kernel launch backend (`cupric.runtime.launch`), read when a kernel's "
    "launch is prepared: c, bindings or cffi.", "each use", _text_or_none)
KERNEL_FASTCALL = Setting(
    "CUPRIC_KERNEL_FASTCALL", "switch", "on",
    "0 keeps `@cupric.kernel` launches on the generated Python launchers instead of the "
    "compiled launcher (`cupric.compiler._fastcall`).", "first use", _on_unless_zero)
FAST_ALLOC = Setting(
    "CUPRIC_FAST_ALLOC", "switch", "on",
    "0 keeps device allocations on the Python path instead of the compiled allocator.",
    "first use", _on_unless_zero)
ALLOC_CACHE = Setting(
    "CUPRIC_ALLOC_CACHE", "int (bytes)", "no limit",
    "The most bytes of freed stream-ordered device memory the allocation cache keeps for "
    "reuse on the stream it was freed on (`cupric.runtime.memory.release_cached`); 0 "
    "turns the cache off.", "first use", _int)
CUBLAS_FASTPATH = Setting(
    "CUPRIC_CUBLAS_FASTPATH", "switch", "on",
    "0 turns off the compiled GEMM replay of `cupric.cublas` (every call goes through "
    "the Python path).", "first use", _on_unless_zero)
CUDNN_FASTPATH = Setting(
    "CUPRIC_CUDNN_FASTPATH", "switch", "on",
    "0 turns off the compiled replay of checked cuDNN calls.", "first use",
    _on_unless_zero)
CUDNN_ENGINE_CACHE = Setting(
    "CUPRIC_CUDNN_ENGINE_CACHE", "switch", "on",
    "0 stops cupric.cudnn from reading and writing its on-disk record of the engines "
    "chosen per graph (every plan then asks cuDNN's heuristics).", "each use",
    _on_unless_zero)
CPP = Setting(
    "CUPRIC_CPP", "`pcpp` or a command", "a C preprocessor on PATH, else pcpp",
    "The C preprocessor that bindings generation runs on library headers (`pcpp`, or a "
    "command such as `gcc -E`).", "each use", _text_or_none)
STORE = Setting(
    "CUPRIC_STORE", "mpi | tcp | file", "chosen from the launcher's variables",
    "Forces the rendezvous store `cupric.distributed` uses to exchange the NCCL id.",
    "each use", _lower_or_none)
STORE_PATH = Setting(
    "CUPRIC_STORE_PATH", "path", "none",
    "A folder every rank can read and write, for the file rendezvous store of "
    "`cupric.distributed`.", "each use", _text_or_none)


#: Every setting by variable name, in the order of the docs table.
SETTINGS: dict[str, Setting] = {s.name: s for s in (
    SIMULATOR, SIMULATOR_ENGINE, SIMULATOR_TIMEOUT, SIMULATOR_MAX_THREADS, CACHE_DIR,
    BINDINGS_DIR, BUILD_LAUNCHER, BUILD_SYNC, BUILD_JOBS, LAUNCH_BACKEND, KERNEL_FASTCALL,
    FAST_ALLOC, ALLOC_CACHE, CUBLAS_FASTPATH, CUDNN_FASTPATH, CUDNN_ENGINE_CACHE, CPP, STORE, STORE_PATH)}


def setting(name: str) -> Setting:
    """The `Setting` of variable `name`.

    Raises
    ------
    KeyError
        For a name cupric does not read.
    """
    try:
        return SETTINGS[name]
    except KeyError:
        raise KeyError(f"{name} is not a cupric setting; known: "
                       f"{', '.join(SETTINGS)}") from None


# `os.environ` keeps the process environment in `_data`, keyed and valued as the
# platform's encoding (bytes on POSIX); `setenv`, `del` and `putenv` through os.environ
# update it. Reading it directly skips `os.environ.get`'s encoding of the key and decoding
# of the value: the ready kernels ask `simulator_requested` on every call.
try:
    _environ_data = _environ._data
    _SIMULATOR_KEY = _environ.encodekey("CUPRIC_SIMULATOR")
    _SIMULATOR_OFF = (None, _environ.encodevalue(""), _environ.encodevalue("0"))
except AttributeError:  # another Python's os.environ: the public lookup
    _environ_data = None


def simulator_requested() -> bool:
    """Whether ``CUPRIC_SIMULATOR`` asks for the simulator (read at each call: a change
    of ``os.environ`` takes effect at once).

    Cost
    ----
    One dictionary lookup: callers on launch paths may ask per launch.
    """
    environ = os.environ
    if environ is _environ and _environ_data is not None:
        return _environ_data.get(_SIMULATOR_KEY) not in _SIMULATOR_OFF
    return environ.get("CUPRIC_SIMULATOR", "") not in ("", "0")


def markdown_table() -> str:
    """The docs table of every setting (docs/configuration.md holds it verbatim)."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|")
    lines = ["| Variable | Type | Default | Read | What it does |",
             "|---|---|---|---|---|"]
    for s in SETTINGS.values():
        lines.append(f"| `{s.name}` | {cell(s.type)} | {cell(s.default)} | {s.read} | "
                     f"{cell(s.doc)} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")

"""Compile options: one frozen, validated dataclass shared by every stage of the backend.

libNVVM, nvJitLink and ptxas each spell the same knob differently (`-opt=3`, `-O3`;
`-generate-line-info`, `-lineinfo`); a single table below turns fields into each tool's
flags so the spelling lives in one place.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

__all__ = ["CompileOptions", "DEFAULT_ARCH", "normalize_arch", "arch_number"]

#: Architecture used when no device is present and none was asked for (H100/H200 class).
DEFAULT_ARCH = "sm_90"

# `sm_90`, `sm_90a` (arch-specific), `sm_100f` (family-specific), also accepted as
# `compute_90`, `90`, `9.0` or the int 90. The suffix letters are CUDA's own.
_ARCH_RE = re.compile(r"^(?:sm_|compute_)?(\d{2,3})([af]?)$")
_DOTTED_RE = re.compile(r"^(\d{1,2})\.(\d)([af]?)$")


def normalize_arch(arch: str | int) -> str:
    """Spell an architecture the canonical way: ``"sm_<major><minor>[a|f]"``.

    Parameters
    ----------
    arch : str or int
        ``"sm_90"``, ``"compute_90"``, ``"90"``, ``"9.0"``, ``90``, ``"sm_90a"``, ...

    Raises
    ------
    ValueError
        If `arch` is not an architecture name.

    Examples
    --------
    >>> normalize_arch("compute_100a"), normalize_arch(80), normalize_arch("8.6")
    ('sm_100a', 'sm_80', 'sm_86')
    """
    if isinstance(arch, bool) or not isinstance(arch, (str, int)):
        raise ValueError(f"arch must be a string like 'sm_90' or an int like 90, got {arch!r}")
    text = str(arch).strip().lower()
    match = _ARCH_RE.match(text)
    if match:
        number, suffix = match.groups()
    else:
        dotted = _DOTTED_RE.match(text)
        if not dotted:
            raise ValueError(
                f"arch {arch!r} is not an architecture name; expected e.g. 'sm_90', "
                "'sm_90a', 'compute_80', '8.6' or 90")
        number, suffix = dotted.group(1) + dotted.group(2), dotted.group(3)
    if int(number) < 50:
        raise ValueError(f"arch {arch!r}: compute capability below 5.0 is not a CUDA target")
    return f"sm_{int(number)}{suffix}"


def arch_number(arch: str) -> int:
    """The compute capability of a canonical arch as an int: ``"sm_90a"`` -> ``90``."""
    return int(_ARCH_RE.match(arch).group(1))


@dataclass(frozen=True)
class CompileOptions:
    """How to compile a kernel: target, optimization, debug info and floating-point rules.

    Parameters
    ----------
    arch : str, int or None
        Target architecture (``"sm_90"``, ``"sm_90a"``, ``90``...). None means the current
        device's architecture when a GPU is present, else `DEFAULT_ARCH`; the backend
        resolves it with :meth:`resolve` before compiling or hashing.
    opt_level : int
        0 (no optimization) to 3 (default). libNVVM, nvJitLink and ptxas all get it.
    debug : bool
        Emit debug information (``-g``). Device-side debug makes code much slower.
    lineinfo : bool
        Emit line tables only (profilers map SASS back to source); cheap.
    fast_math : bool
        Convenience: sets ``ftz=True, prec_div=False, prec_sqrt=False, fma=True`` for the
        switches that are not given explicitly.
    ftz : bool or None
        Flush single-precision denormals to zero. Default False (True with `fast_math`).
    prec_div, prec_sqrt : bool or None
        IEEE round-to-nearest single-precision division / square root. Default True
        (False with `fast_math`).
    fma : bool or None
        Allow contracting multiply-add into FMA. Default True.
    max_registers : int or None
        Upper bound on registers per thread (16..255), trading occupancy for spills.

    Raises
    ------
    ValueError, TypeError
        At construction, when a field is out of range or of the wrong type.

    Examples
    --------
    >>> CompileOptions(arch=90, fast_math=True).nvvm_flags()
    ['-arch=compute_90', '-opt=3', '-ftz=1', '-prec-div=0', '-prec-sqrt=0', '-fma=1']

    Thread safety
    -------------
    Immutable; share freely.
    """

    arch: str | None = None
    opt_level: int = 3
    debug: bool = False
    lineinfo: bool = False
    fast_math: bool = False
    ftz: bool | None = None
    prec_div: bool | None = None
    prec_sqrt: bool | None = None
    fma: bool | None = None
    max_registers: int | None = None

    def __post_init__(self) -> None:
        # Frozen: normalized values are stored through object.__setattr__, once, here.
        if self.arch is not None:
            object.__setattr__(self, "arch", normalize_arch(self.arch))
        if isinstance(self.opt_level, bool) or not isinstance(self.opt_level, int):
            raise TypeError(f"opt_level must be an int 0..3, got {self.opt_level!r}")
        if not 0 <= self.opt_level <= 3:
            raise ValueError(f"opt_level must be 0..3, got {self.opt_level}")
        for name in ("debug", "lineinfo", "fast_math"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        fast = self.fast_math
        defaults = {"ftz": fast, "prec_div": not fast, "prec_sqrt": not fast, "fma": True}
        for name, default in defaults.items():
            value = getattr(self, name)
            if value is None:
                object.__setattr__(self, name, default)
            elif not isinstance(value, bool):
                raise TypeError(f"{name} must be True, False or None, got {value!r}")
        if self.max_registers is not None:
            if isinstance(self.max_registers, bool) or not isinstance(self.max_registers, int):
                raise TypeError(f"max_registers must be an int or None, got {self.max_registers!r}")
            if not 16 <= self.max_registers <= 255:
                raise ValueError(f"max_registers must be 16..255, got {self.max_registers}")

    # -- derived forms -------------------------------------------------------------------

    def resolve(self, arch: str | int | None = None) -> "CompileOptions":
        """These options with a concrete `arch`.

        `arch` wins when given; otherwise keep `self.arch`; otherwise the current
        device's arch (`cupric.compiler.target.current_arch`), else `DEFAULT_ARCH`.

        Cost
        ----
        The first call without any arch probes the driver once (cached afterwards).
        """
        if arch is not None:
            chosen = normalize_arch(arch)
        elif self.arch is not None:
            return self
        else:
            from cupric.compiler.target import current_arch  # lazy: may probe the driver

            chosen = current_arch() or DEFAULT_ARCH
        return dataclasses.replace(self, arch=chosen)

    def _require_arch(self) -> str:
        if self.arch is None:
            raise ValueError("CompileOptions.arch is None; call options.resolve() first")
        return self.arch

    def nvvm_flags(self) -> list[str]:
        """libNVVM options (`nvvmCompileProgram`) for these options; `arch` must be set."""
        arch = self._require_arch()
        flags = [f"-arch=compute_{arch[3:]}", f"-opt={self.opt_level}"]
        flags += [f"{flag}={int(getattr(self, field))}" for field, flag in _NVVM_SWITCHES]
        if self.debug:
            flags.append("-g")
        elif self.lineinfo:
            flags.append("-generate-line-info")
        if self.max_registers is not None:
            flags.append(f"-maxreg={self.max_registers}")
        return flags

    def nvjitlink_flags(self) -> list[str]:
        """nvJitLink options (`nvJitLinkCreate`) for linking PTX into a cubin."""
        arch = self._require_arch()
        # Like ptxas (which it runs), nvJitLink refuses -g together with optimization.
        # nvJitLink takes -O0 and -O3 only; intermediate levels go to its ptxas pass.
        level = 0 if self.debug else self.opt_level
        if level in (0, 3):
            flags = [f"-arch={arch}", f"-O{level}", "-verbose"]
        else:
            flags = [f"-arch={arch}", f"-Xptxas=-O{level}", "-verbose"]
        if self.debug:
            flags.append("-g")
        elif self.lineinfo:
            flags.append("-lineinfo")
        if self.max_registers is not None:
            flags.append(f"-maxrregcount={self.max_registers}")
        return flags

    def ptxas_flags(self) -> list[str]:
        """ptxas command-line options (without input/output files)."""
        arch = self._require_arch()
        # ptxas refuses -g with optimizations on; device debug means -O0 there.
        flags = [f"-arch={arch}", f"-O{0 if self.debug else self.opt_level}", "-v"]
        if self.debug:
            flags.append("-g")
        elif self.lineinfo:
            flags.append("-lineinfo")
        if self.max_registers is not None:
            flags.append(f"--maxrregcount={self.max_registers}")
        return flags

    def cache_key(self) -> str:
        """A stable text naming everything that changes the generated code.

        `fast_math` itself is left out: only the switches it resolved to matter, so
        ``CompileOptions(fast_math=True)`` and the same switches given one by one share
        cache entries. Unresolved `arch` appears as ``arch=auto``.
        """
        parts = [
            f"arch={self.arch or 'auto'}", f"opt={self.opt_level}",
            f"debug={int(self.debug)}", f"lineinfo={int(self.lineinfo)}",
            f"ftz={int(self.ftz)}", f"prec_div={int(self.prec_div)}",
            f"prec_sqrt={int(self.prec_sqrt)}", f"fma={int(self.fma)}",
            f"maxreg={self.max_registers or 0}",
        ]
        return ";".join(parts)


# Floating-point switches: dataclass field -> libNVVM option (value 0/1). nvJitLink and
# ptxas take no such switches for PTX input: the choice is already baked into the PTX.
_NVVM_SWITCHES = (("ftz", "-ftz"), ("prec_div", "-prec-div"), ("prec_sqrt", "-prec-sqrt"),
                  ("fma", "-fma"))

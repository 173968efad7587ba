"""`python -m cupric info`: what cupric found on this machine.

Reports the driver and every GPU, the compile toolchain (libNVVM, libdevice, ptxas,
nvJitLink), the CUDA libraries (cuBLAS, cuBLASLt, cuRAND, cuDNN, NCCL, OptiX) and the cache
directory. Every probe is independent: a missing driver or library is reported as such and
the rest is still shown.
"""

from __future__ import annotations

import ctypes
import json
import platform
import sys
from importlib import metadata


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _driver_section() -> dict:
    try:
        from cuda.bindings import driver as drv
    except ImportError as exc:
        return {"available": False, "reason": f"cuda-python is not installed ({exc})"}
    try:
        (err,) = drv.cuInit(0)
    except Exception as exc:  # DynamicLibNotFoundError when libcuda.so is absent
        return {"available": False,
                "reason": f"no CUDA driver found ({type(exc).__name__}: {exc})"}
    if err != drv.CUresult.CUDA_SUCCESS:
        return {"available": False, "reason": f"cuInit failed: {err.name}"}
    _, version = drv.cuDriverGetVersion()
    _, count = drv.cuDeviceGetCount()
    attr = drv.CUdevice_attribute
    devices = []
    for ordinal in range(count):
        _, dev = drv.cuDeviceGet(ordinal)
        _, name = drv.cuDeviceGetName(256, dev)
        _, total = drv.cuDeviceTotalMem(dev)
        _, major = drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        _, minor = drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
        _, sms = drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)
        _, uuid = drv.cuDeviceGetUuid(dev)
        devices.append({
            "ordinal": ordinal,
            "name": name.split(b"\0", 1)[0].decode(),
            "compute_capability": f"{major}.{minor}",
            "memory_gib": round(total / 2**30, 1),
            "multiprocessors": sms,
            "uuid": bytes(uuid.bytes).hex(),
        })
    return {"available": True, "driver_cuda_version": f"{version // 1000}.{version % 1000 // 10}",
            "devices": devices}


def _toolchain_section() -> dict:
    try:
        from .compiler import toolchain
    except ImportError as exc:
        return {"error": f"cupric.compiler.toolchain is not importable: {exc}"}
    return toolchain.report()


def _version_cublas(lib) -> str:
    value = ctypes.c_int()
    parts = []
    for prop in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
        if lib.cublasGetProperty(prop, ctypes.byref(value)) != 0:
            raise OSError("cublasGetProperty failed")
        parts.append(str(value.value))
    return ".".join(parts)


def _version_int_out(symbol: str):
    def probe(lib) -> str:
        value = ctypes.c_int()
        status = getattr(lib, symbol)(ctypes.byref(value))
        if status != 0:
            raise OSError(f"{symbol} returned {status}")
        return str(value.value)
    return probe


def _version_size_t(symbol: str):
    def probe(lib) -> str:
        function = getattr(lib, symbol)
        function.restype = ctypes.c_size_t
        return str(function())
    return probe


# label -> (cuda.pathfinder library name, pip package, version probe)
_LIBRARIES = {
    "cuBLAS": ("cublas", "nvidia-cublas", _version_cublas),
    "cuBLASLt": ("cublasLt", "nvidia-cublas", _version_size_t("cublasLtGetVersion")),
    "cuRAND": ("curand", "nvidia-curand", _version_int_out("curandGetVersion")),
    "cuDNN": ("cudnn", "nvidia-cudnn-cu13", _version_size_t("cudnnGetVersion")),
    "NCCL": ("nccl", "nvidia-nccl-cu13", _version_int_out("ncclGetVersion")),
}


def _library_section() -> dict:
    out: dict = {}
    try:
        from cuda import pathfinder
    except ImportError as exc:
        return {"error": f"cuda-pathfinder is not installed ({exc})"}
    for label, (name, package, probe) in _LIBRARIES.items():
        try:
            found = pathfinder.load_nvidia_dynamic_lib(name)
        except Exception as exc:  # DynamicLibNotFoundError and friends
            out[label] = {"found": False, "install": f"pip install {package}",
                          "reason": type(exc).__name__}
            continue
        entry = {"found": True, "path": found.abs_path, "found_via": found.found_via}
        if probe is not None:
            try:
                entry["version"] = probe(ctypes.CDLL(found.abs_path))
            except (OSError, AttributeError) as exc:
                entry["version_error"] = str(exc)
        out[label] = entry
    try:
        ctypes.CDLL("libnvoptix.so.1")
        out["OptiX"] = {"found": True, "path": "libnvoptix.so.1 (driver)"}
    except OSError:
        out["OptiX"] = {"found": False, "reason": "libnvoptix.so.1 ships with the NVIDIA driver"}
    return out


def collect() -> dict:
    """Everything `info` reports, as a JSON-able dict."""
    from . import __version__
    from ._paths import cache_root

    return {
        "cupric": __version__,
        "python": platform.python_version(),
        "packages": {name: _package_version(name) for name in
                     ("numpy", "cuda-bindings", "cuda-pathfinder", "cffi", "pycparser")},
        "driver": _driver_section(),
        "toolchain": _toolchain_section(),
        "libraries": _library_section(),
        "cache_dir": str(cache_root()),
    }


def _table(headers: tuple, rows: list) -> list[str]:
    """Lines of a left-aligned text table (the last column is not padded)."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers) - 1)]
    lines = []
    for row in [headers, *rows]:
        cells = [f"{str(c):<{w}}" for c, w in zip(row, widths)] + [str(row[-1])]
        lines.append("  " + "  ".join(cells).rstrip())
    return lines


def _component_row(name: str, entry: dict) -> tuple:
    """(component, found, version, found via, path or why not) of one probe's dict."""
    if "error" in entry:
        return (name, "no", "-", "-", entry["error"])
    if entry.get("found") is False:
        why = entry.get("reason", "")
        if entry.get("install"):
            why = f"{entry['install']} ({why})" if why else entry["install"]
        return (name, "no", "-", "-", why)
    extras = [f"{key.replace('_', ' ')} {entry[key]}" for key in
              ("ir_version", "ptx_isa") if key in entry]
    where = entry.get("path", "")
    if extras:
        where += f"  ({', '.join(extras)})"
    version = entry.get("version") or entry.get("version_error", "?")
    return (name, "yes", version, entry.get("found_via", "-"), where)


def render_text(info: dict) -> str:
    """The human-readable report: one table per section."""
    lines = [f"cupric {info['cupric']} on Python {info['python']}", "",
             "packages:"]
    lines += _table(("package", "version"),
                    [(k, v or "missing") for k, v in info["packages"].items()])
    drv = info["driver"]
    lines.append("")
    if drv["available"]:
        lines.append(f"driver: CUDA {drv['driver_cuda_version']}, "
                     f"{len(drv['devices'])} GPU(s)")
        lines += _table(("#", "name", "arch", "memory", "SMs", "uuid"), [
            (d["ordinal"], d["name"], "sm_" + d["compute_capability"].replace(".", ""),
             f"{d['memory_gib']} GiB", d["multiprocessors"], d["uuid"])
            for d in drv["devices"]])
        toolchain_driver = info["toolchain"].get("driver", {})
        if "max_ptx_isa" in toolchain_driver:
            lines.append(f"  newest PTX ISA the driver loads: {toolchain_driver['max_ptx_isa']}")
    else:
        lines.append("driver: none; kernels run on the CPU simulator")
        lines.append(f"  {drv['reason']}")
    lines += ["", "toolchain and libraries:"]
    rows = [_component_row(name, entry) for name, entry in info["toolchain"].items()
            if name != "driver"]
    libraries = info["libraries"]
    if "error" in libraries and not isinstance(libraries["error"], dict):
        rows.append(("libraries", "no", "-", "-", libraries["error"]))
    else:
        rows += [_component_row(name, entry) for name, entry in libraries.items()]
    lines += _table(("component", "found", "version", "via", "path"), rows)
    lines += ["", f"cache: {info['cache_dir']}"]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m cupric info", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true",
                        help="print the report as JSON (for scripts) instead of tables")
    args = parser.parse_args(argv)
    info = collect()
    if args.json:
        json.dump(info, sys.stdout, indent=2)
        print()
    else:
        print(render_text(info))
    return 0

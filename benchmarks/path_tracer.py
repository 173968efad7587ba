"""Path tracer: rays per second of the OptiX backend against the CUDA backend, and time
to first image (examples/path_tracer.py).

Both backends render the same scene, camera, seed and sample count with the same
shading code: the CUDA backend is a cupric kernel tracing through a software BVH (binned
SAH, built on the host with NumPy), the OptiX backend cupric OptiX programs tracing
through OptiX's acceleration structures. Rays are counted exactly: every pixel's thread
adds the rays it traced to a per-pixel counter, so rays/s are rays traced over seconds
of the timed launches (the image copied back to the host included; the best of
`REPEATS`). Scenes: ``showcase`` (17 spheres, 22 triangles: shading dominates) and
``heavy`` (the same spheres beside about a million triangles: traversal dominates), full
paths (up to 8 bounces, incoherent secondary rays) and, on the heavy scene, primary rays
alone (``max_depth`` 1: coherent camera rays).

OptiX's speed depends on RT cores: `DeviceContext.rtcore_version` reports their version,
0 where the GPU has none (H100, H200: compute GPUs), and OptiX then traverses in
software on the SMs, with no hardware advantage over a CUDA kernel.

Time to first image: a fresh Python process, from its start (measured by the parent,
around the spawn) to the first image on the host: imports, scene, BVH or acceleration
structures, compilation (cupric kernel or OptiX module), one 1-spp launch and the copy
back. "cold": empty cupric, OptiX and CUDA caches (fresh CUPRIC_CACHE_DIR,
OPTIX_CACHE_PATH, CUDA_CACHE_PATH); "warm": the same command again, caches filled.

    python3 benchmarks/path_tracer.py [--json PATH]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from _common import script_main, table

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(HERE), "examples")
REPEATS = 2
#: (scene, width, height, spp, max_depth) of the timed renders.
CASES = (("showcase", 1280, 720, 256, 8),
         ("heavy", 1280, 720, 32, 8),
         ("heavy", 1280, 720, 128, 1))
FIRST_IMAGE = (("showcase", "cold"), ("showcase", "warm"), ("heavy", "warm"))
FIRST_IMAGE_SIZE = (1280, 720)

_CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import path_tracer as pt
imported = time.time()
scene = pt.make_scene(sys.argv[3])
made = time.time()
renderer = pt.CudaRenderer(scene) if sys.argv[2] == "cuda" else pt.OptixRenderer(scene)
ready = time.time()
result = renderer.render(int(sys.argv[4]), int(sys.argv[5]), 1, progress=False,
                         warm_up=False)
done = time.time()
print(json.dumps({"imported": imported, "scene": made, "renderer": ready, "image": done,
                  "rays": result.rays, "mean": float(result.image.mean())}))
"""


def _best(render, repeats=REPEATS):
    results = [render() for _ in range(repeats)]
    return min(results, key=lambda r: r.seconds)


def _check(pt, renderers, max_depth) -> dict:
    """Before timing: both backends render a small image of the scene with the same seed;
    their ray counts and images must agree (they share the shading code)."""
    cuda, optix = renderers
    a, b = (r.render(96, 54, 4, seed=7, max_depth=max_depth, batch=4, progress=False)
            for r in (cuda, optix))
    rays = abs(a.rays - b.rays) / a.rays
    diff = pt.mean_abs_diff(a.image, b.image)
    if not (a.rays > 0 and rays < 1e-4 and diff < 1e-3 and float(a.image.mean()) > 0):
        raise AssertionError(f"backends disagree before timing: rays {a.rays} vs {b.rays}, "
                             f"mean image difference {diff}")
    return {"rays_relative_difference": rays, "mean_abs_diff": diff}


def _case(pt, renderers, scene_name, width, height, spp, max_depth) -> dict:
    cuda, optix = renderers
    row: dict = {"size": f"{width}x{height}", "spp": spp, "max_depth": max_depth,
                 "check": _check(pt, renderers, max_depth)}
    results = {}
    for name, renderer in (("cuda", cuda), ("optix", optix)):
        r = _best(lambda: renderer.render(width, height, spp, seed=1, max_depth=max_depth,
                                          batch=spp if max_depth == 1 else 8,
                                          progress=False))
        results[name] = r
        row[name] = {"seconds": r.seconds, "rays": r.rays,
                     "Mrays_per_s": r.rays_per_second / 1e6,
                     "Msamples_per_s": r.samples_per_second / 1e6}
    row["optix_over_cuda_rays_per_s"] = (results["optix"].rays_per_second
                                         / results["cuda"].rays_per_second)
    row["rays_relative_difference"] = (abs(results["optix"].rays - results["cuda"].rays)
                                       / results["cuda"].rays)
    row["mean_abs_diff"] = pt.mean_abs_diff(results["cuda"].image, results["optix"].image)
    return row


def _sphere_modes(pt, scene, width, height, spp, max_depth) -> dict:
    """OptiX's rays/s with each way of intersecting spheres ("builtin" renders glass
    wrong: OptiX culls exit hits; it is timed for its speed only)."""
    out = {}
    for mode in pt.SPHERE_MODES:
        renderer = pt.OptixRenderer(scene, mode)
        try:
            r = _best(lambda: renderer.render(width, height, spp, seed=1,
                                              max_depth=max_depth, batch=8, progress=False))
            out[mode] = r.rays_per_second / 1e6
        finally:
            renderer.close()
    return out


def _first_image(backend: str, scene: str, caches: dict) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1", **caches)
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-c", _CHILD, EXAMPLES, backend, scene,
                           str(FIRST_IMAGE_SIZE[0]), str(FIRST_IMAGE_SIZE[1])],
                          capture_output=True, text=True, env=env, timeout=300)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1][:300] if proc.stderr
                else f"exit status {proc.returncode}"}
    child = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"seconds": child["image"] - t0,
            "start_to_imported": child["imported"] - t0,
            "scene": child["scene"] - child["imported"],
            "renderer": child["renderer"] - child["scene"],
            "first_launch_and_copy": child["image"] - child["renderer"]}


def _time_to_first_image(results: dict, quick: bool = False) -> None:
    rows: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        caches = {"CUPRIC_CACHE_DIR": os.path.join(tmp, "cupric"),
                  "OPTIX_CACHE_PATH": os.path.join(tmp, "optix"),
                  "CUDA_CACHE_PATH": os.path.join(tmp, "cuda")}
        for path in caches.values():
            os.makedirs(path)
        for backend in ("cuda", "optix"):
            for scene, state in (FIRST_IMAGE[:1] if quick else FIRST_IMAGE):
                key = f"{backend} {scene} {state}"
                try:
                    rows[key] = _first_image(backend, scene, caches)
                except Exception as exc:
                    rows[key] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    results["time_to_first_image"] = rows


def _load_example():
    """examples/path_tracer.py under a name of its own (this module is `path_tracer`
    too). Its helper module `_common` (examples/_common.py) has the name of this
    directory's: the benchmarks' one is set aside while the example loads (the example
    puts examples/ first on the path), then put back."""
    import importlib.util
    name = "cupric_example_path_tracer"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES,
                                                                     "path_tracer.py"))
    module = importlib.util.module_from_spec(spec)
    ours = sys.modules.pop("_common", None)
    sys.modules[name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    finally:
        sys.modules.pop("_common", None)
        if ours is not None:
            sys.modules["_common"] = ours
    return module


def _rates(results: dict, quick: bool = False) -> None:
    pt = _load_example()
    from cupric.runtime import current_device
    results["device"] = current_device().name
    rows: dict = {}
    scenes: dict = {}
    for scene_name, width, height, spp, max_depth in (CASES[:1] if quick else CASES):
        key = f"{scene_name} {width}x{height} {spp}spp depth {max_depth}"
        try:
            if scene_name not in scenes:
                for cached in scenes.values():
                    cached[1].close()  # one scene's OptiX objects at a time
                scenes.clear()
                scene = pt.make_scene(scene_name)
                cuda = pt.CudaRenderer(scene)
                optix = pt.OptixRenderer(scene)
                scenes[scene_name] = (cuda, optix)
                results.setdefault("rtcore_version", optix.rtcore_version)
                results[f"{scene_name}_scene"] = {
                    "spheres": len(scene.spheres), "triangles": len(scene.triangles),
                    "cuda_bvh_build_s": cuda.build_seconds,
                    "cuda_bvh_nodes": len(cuda.bvh.nodes), "cuda_bvh_depth": cuda.bvh.depth,
                    "cuda_bvh_sah_cost": cuda.bvh.sah_cost,
                    "optix_accel_build_s": optix.build_seconds,
                    "optix_compile_s": optix.compile_seconds}
            rows[key] = _case(pt, scenes[scene_name], scene_name, width, height, spp,
                              max_depth)
            if scene_name == "showcase":
                rows[key]["optix_sphere_modes_Mrays_per_s"] = _sphere_modes(
                    pt, scenes[scene_name][0].scene, width, height, spp, max_depth)
        except Exception as exc:  # one failing row must not hide the others
            rows[key] = {"error": f"{type(exc).__name__}: {exc}"[:400]}
    for cached in scenes.values():
        cached[1].close()
    results["rays"] = rows


def run(json_path: str | None = None, quick: bool = False) -> dict:
    """Measure, print the table, and return (and optionally write) the results."""
    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    try:
        _rates(results, quick)
    except Exception as exc:  # reported in the table and JSON, never hidden
        results["rates_error"] = f"{type(exc).__name__}: {exc}"[:500]
    try:
        _time_to_first_image(results, quick)
    except Exception as exc:
        results["first_image_error"] = f"{type(exc).__name__}: {exc}"[:500]
    results["title"] = "Path tracer: OptiX against the CUDA backend"
    results["method"] = (
        "examples/path_tracer.py, both backends on the same scene, camera, seed and "
        "samples, sharing the shading code; before timing both render a small image whose "
        "ray counts and pixels must agree. Rays counted exactly per pixel; best of "
        f"{REPEATS}, the image copied to the host included. OptiX rtcore version "
        f"{results.get('rtcore_version')} (0: no RT cores, OptiX traverses in software).")
    rows = []
    for key, row in (results.get("rays") or {}).items():
        if "error" in row:
            rows.append([key, None, None, None, None, row["error"]])
        else:
            rows.append([key, row["cuda"]["Mrays_per_s"], row["optix"]["Mrays_per_s"],
                         row["optix_over_cuda_rays_per_s"], row["mean_abs_diff"], ""])
    tables = [table("Mrays/s", [("case", ""), ("CUDA backend", ".0f"), ("OptiX", ".0f"),
                                ("OptiX / CUDA", ".2f"), ("image difference", ".1e"),
                                ("error", "")], rows)]
    rows = [[key, row.get("seconds"), row.get("start_to_imported"), row.get("renderer"),
             row.get("first_launch_and_copy"), row.get("error", "")]
            for key, row in (results.get("time_to_first_image") or {}).items()]
    if rows:
        tables.append(table("Time to first image, fresh process (s)",
                            [("backend, scene, caches", ""), ("total", ".2f"),
                             ("to imported", ".2f"), ("renderer", ".2f"),
                             ("launch + copy", ".2f"), ("error", "")], rows))
    results["tables"] = tables
    _print(results)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(results, f, indent=1)
    return results


def _print(results: dict) -> None:
    rtcore = results.get("rtcore_version")
    print(f"device: {results.get('device')}  OptiX rtcore version {rtcore}"
          f"{' (no RT cores: OptiX traverses in software)' if rtcore == 0 else ''}")
    for name in ("showcase", "heavy"):
        info = results.get(f"{name}_scene")
        if info:
            print(f"{name}: {info['spheres']} spheres, {info['triangles']} triangles; cuda BVH "
                  f"{info['cuda_bvh_build_s']:.2f} s ({info['cuda_bvh_nodes']} nodes, depth "
                  f"{info['cuda_bvh_depth']}, SAH {info['cuda_bvh_sah_cost']:.1f}); optix AS "
                  f"{info['optix_accel_build_s']:.3f} s, compile {info['optix_compile_s']:.2f} s")
    print(f"{'case':40s} {'cuda Mrays/s':>12s} {'optix Mrays/s':>13s} {'optix/cuda':>10s} "
          f"{'rays diff':>9s} {'img diff':>8s}")
    for key, row in results.get("rays", {}).items():
        if "error" in row:
            print(f"{key:40s} error: {row['error']}")
            continue
        print(f"{key:40s} {row['cuda']['Mrays_per_s']:12.1f} {row['optix']['Mrays_per_s']:13.1f} "
              f"{row['optix_over_cuda_rays_per_s']:10.2f} {row['rays_relative_difference']:9.1e} "
              f"{row['mean_abs_diff']:8.5f}")
        modes = row.get("optix_sphere_modes_Mrays_per_s")
        if modes:
            print(f"{'':40s} optix Mrays/s by --optix-spheres: "
                  + ", ".join(f"{k} {v:.1f}" for k, v in modes.items()))
    for key, row in results.get("time_to_first_image", {}).items():
        if "error" in row:
            print(f"first image {key:28s} error: {row['error']}")
        else:
            print(f"first image {key:28s} {row['seconds']:6.2f} s (imports "
                  f"{row['start_to_imported']:.2f}, scene {row['scene']:.2f}, renderer "
                  f"{row['renderer']:.2f}, launch+copy {row['first_launch_and_copy']:.2f})")
    for key, value in results.items():
        if key.endswith("error"):
            print(f"{key}: {value}")


main = script_main(run, __doc__.splitlines()[0], "rays")


if __name__ == "__main__":
    raise SystemExit(main())

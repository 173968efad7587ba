"""ResNet-style 3x3 convolution through cupric.cudnn beside PyTorch, in one process run.

The layer: input 256x64x56x56, filter 64x64x3x3, padding 1, stride 1 - forward,
backward-data and backward-filter, in TF32 (float32 data, NCHW), float16 and bfloat16
(NHWC, the layout tensor cores want). PyTorch runs the same cuDNN underneath
(``torch.nn.functional.conv2d`` and ``aten.convolution_backward`` with one gradient
asked for at a time). Two engine-choice regimes, each against its PyTorch peer:

* heuristics: cupric's default (cuDNN heuristics mode A) vs ``cudnn.benchmark = False``;
* autotuned: ``PlanOptions(autotune=True)`` vs ``cudnn.benchmark = True``.

Same random operands (never zeros) for both, CUDA events on the same stream, 3 warm-up
calls (which build and tune the plans), the median of 10 samples of 4 back-to-back calls,
rows taking turns sample by sample. The results of the two libraries are compared.

    python3 benchmarks/conv.py [--json PATH]
"""

from __future__ import annotations

import json
import statistics
import time

from _common import assert_correct, script_main, table

N, C, K, H, W, R = 256, 64, 64, 56, 56, 3
WARMUP, TIMED, PER_SAMPLE = 3, 10, 4
FLOP = 2.0 * N * K * C * R * R * H * W     # stride 1, "same" padding: P = H, Q = W
PASSES = ("forward", "backward_data", "backward_filter")


def _operands(torch, dtype, channels_last):
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)

    def make(shape, scale=1.0):
        t = torch.randn(shape, device="cuda", dtype=torch.float32, generator=gen) * scale
        return t.to(dtype).contiguous(memory_format=fmt)

    x = make((N, C, H, W))
    w = make((K, C, R, R), 0.05)
    dy = make((N, K, H, W))
    return x, w, dy, fmt


def _row(torch, dnn, name, dtype, channels_last, autotune) -> dict:
    x, w, dy, fmt = _operands(torch, dtype, channels_last)
    tf32 = dtype == torch.float32
    options = dnn.PlanOptions(autotune=autotune, allow_tf32=tf32)
    outs = {p: (torch.empty((N, K, H, W) if p == "forward" else
                            (N, C, H, W) if p == "backward_data" else (K, C, R, R),
                            device="cuda", dtype=dtype).contiguous(memory_format=fmt))
            for p in PASSES}
    conv_backward = torch.ops.aten.convolution_backward

    def torch_pass(which):
        torch.backends.cudnn.benchmark = autotune
        torch.backends.cudnn.allow_tf32 = tf32
        if which == "forward":
            return torch.nn.functional.conv2d(x, w, padding=1)
        mask = [which == "backward_data", which == "backward_filter", False]
        grads = conv_backward(dy, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                              mask)
        return grads[0] if which == "backward_data" else grads[1]

    def ours(which):
        if which == "forward":
            return dnn.conv_forward(x, w, padding=1, out=outs[which], options=options)
        if which == "backward_data":
            return dnn.conv_backward_data(dy, w, (N, C, H, W), padding=1, out=outs[which],
                                          options=options)
        return dnn.conv_backward_filter(x, dy, (K, C, R, R), padding=1, out=outs[which],
                                        options=options)

    # Correct before timing: each side's result, outputs poisoned, against the same pass
    # computed in float32 without TF32 from the same operands (every element, on the
    # device). The bound scales with the operands' largest product sum.
    checks = {}
    up = [t.float() for t in (x, w, dy)]
    previous = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    fx, fw, fdy = up
    references = {"forward": torch.nn.functional.conv2d(fx, fw, padding=1),
                  "backward_data": conv_backward(fdy, fx, fw, None, [1, 1], [1, 1], [1, 1],
                                                 False, [0, 0], 1, [True, False, False])[0],
                  "backward_filter": conv_backward(fdy, fx, fw, None, [1, 1], [1, 1], [1, 1],
                                                   False, [0, 0], 1, [False, True, False])[1]}
    torch.backends.cudnn.allow_tf32 = previous
    del up, fx, fw, fdy
    tol = 5e-3 if tf32 else 2e-2
    for which in PASSES:
        ref = references[which]
        scale = float(ref.abs().max())
        for key, fn, out in (("cupric", lambda: ours(which), outs[which]),
                             ("torch", lambda: torch_pass(which), None)):
            box = {}
            checks[f"{which} {key}"] = assert_correct(
                f"conv {name} {which} {key}", lambda fn=fn, box=box: box.setdefault("r", fn()),
                (lambda box=box: box["r"]) if out is None else out, ref,
                outputs=[out] if out is not None else [], rtol=tol, atol=tol * scale)
    del references
    stream = torch.cuda.current_stream()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    result = {}
    for which in PASSES:
        fns = {"torch": lambda: torch_pass(which), "cupric": lambda: ours(which)}
        for fn in fns.values():
            for _ in range(WARMUP):
                fn()
        torch.cuda.synchronize()
        samples = {key: [] for key in fns}
        for _ in range(TIMED):
            for key, fn in fns.items():
                start.record(stream)
                for _ in range(PER_SAMPLE):
                    fn()
                end.record(stream)
                end.synchronize()
                samples[key].append(start.elapsed_time(end) / 1e3 / PER_SAMPLE)
        reference = torch_pass(which).float()
        ours(which)
        torch.cuda.synchronize()
        got = outs[which].float()
        diff = (got - reference).abs().max().item() / reference.abs().max().item()
        t_torch = statistics.median(samples["torch"])
        t_ours = statistics.median(samples["cupric"])
        result[which] = {"cupric_TFLOPs": FLOP / t_ours / 1e12,
                         "torch_TFLOPs": FLOP / t_torch / 1e12,
                         "ratio": t_torch / t_ours, "max_rel_diff_vs_torch": diff,
                         "check_max_rel_diff": {k.split()[1]: v["max_rel_diff"]
                                                for k, v in checks.items()
                                                if k.startswith(which)}}
    return result


def _rates(results: dict, quick: bool = False) -> None:
    import torch

    from cupric.cudnn import api as dnn

    rows = {}
    configs = (("tf32 NCHW", torch.float32, False), ("fp16 NHWC", torch.float16, True),
               ("bf16 NHWC", torch.bfloat16, True))
    for name, dtype, channels_last in (configs[1:2] if quick else configs):
        for regime, autotune in ((("heuristics", False),) if quick else
                                 (("heuristics", False), ("autotuned", True))):
            key = f"{name} {regime}"
            try:
                rows[key] = _row(torch, dnn, name, dtype, channels_last, autotune)
            except Exception as exc:  # one failing row must not hide the others
                rows[key] = {"error": f"{type(exc).__name__}: {exc}"[:400]}
            torch.cuda.empty_cache()
    torch.backends.cudnn.benchmark = False
    results["conv3x3_256x64x56x56"] = rows


def run(json_path: str | None = None, quick: bool = False) -> dict:
    """Measure, print the table, and return (and optionally write) the results."""
    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    try:
        import torch
        results["device"] = torch.cuda.get_device_name()
        results["torch"] = torch.__version__
        results["torch_cudnn"] = torch.backends.cudnn.version()
    except Exception as exc:  # reported in the table and JSON, never hidden
        results["setup_error"] = f"{type(exc).__name__}: {exc}"
    try:
        _rates(results, quick)
    except Exception as exc:
        results["rates_error"] = f"{type(exc).__name__}: {exc}"[:500]
    try:
        from cupric.cudnn import lib
        results["cudnn_library"] = lib.binding.path
        results["cudnn_version"] = int(lib.lib.cudnnGetVersion())
    except Exception as exc:
        results["library_error"] = f"{type(exc).__name__}: {exc}"[:300]
    results["title"] = "Convolution through cupric.cudnn, GPU-bound"
    results["method"] = (
        f"ResNet-style 3x3 convolution {N}x{C}x{H}x{W}, {K} filters, padding 1, forward / "
        "backward-data / backward-filter, TFLOP/s; the same random operands for both "
        "libraries, each side's result checked against float32 (no TF32) before timing; "
        f"CUDA events, {WARMUP} warm-up calls, the median of {TIMED} samples of "
        f"{PER_SAMPLE} back-to-back calls, rows taking turns. Heuristics: cupric's default "
        "beside `cudnn.benchmark = False`; autotuned: `PlanOptions(autotune=True)` beside "
        "`cudnn.benchmark = True`. Per-call host cost and small layers: host_cost.py.")
    rows = []
    for key, row in (results.get("conv3x3_256x64x56x56") or {}).items():
        if "error" in row:
            rows.append([key] + [None] * 9 + [row["error"]])
            continue
        cells = [key]
        for which in PASSES:
            cells += [row[which]["cupric_TFLOPs"], row[which]["torch_TFLOPs"],
                      row[which]["ratio"]]
        rows.append(cells + [""])
    cols = [("config", "")]
    for which in ("fwd", "bwd data", "bwd filter"):
        cols += [(f"{which} cupric", ".1f"), (f"{which} PyTorch", ".1f"),
                 (f"{which} cupric / PyTorch", ".3f")]
    results["tables"] = [table("TFLOP/s", cols + [("error", "")], rows)]
    _print(results)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(results, f, indent=1)
    return results


def _print(results: dict) -> None:
    print(f"device: {results.get('device')}  torch {results.get('torch')} "
          f"(cuDNN {results.get('torch_cudnn')})  cupric cuDNN {results.get('cudnn_version')}")
    rows = results.get("conv3x3_256x64x56x56", {})
    if rows:
        print(f"{'3x3 conv 256x64x56x56':26s} {'pass':16s} {'cupric TF/s':>12s} "
              f"{'torch TF/s':>11s} {'ratio':>6s} {'max rel diff':>13s}")
        for name, row in rows.items():
            if "error" in row:
                print(f"{name:26s} error: {row['error']}")
                continue
            for which, r in row.items():
                print(f"{name:26s} {which:16s} {r['cupric_TFLOPs']:12.1f} "
                      f"{r['torch_TFLOPs']:11.1f} {r['ratio']:6.3f} "
                      f"{r['max_rel_diff_vs_torch']:13.2e}")
    for key, value in results.items():
        if key.endswith("error"):
            print(f"{key}: {value}")


main = script_main(run, __doc__.splitlines()[0], "conv3x3_256x64x56x56")


if __name__ == "__main__":
    raise SystemExit(main())

"""Monte-Carlo with gpu_rand inside a kernel: pi from random points in the unit square,
and the price of a European call option under Black–Scholes from simulated prices at
expiry, with the standard error and the closed-form price beside it.

Each GPU thread owns one gpu_rand stream (`Generator.device_states`: stream t is the seed's
state jumped t times, so the streams never overlap), loads it into registers, draws with
`cupric.gpu_rand.device_rng`, and writes its partial sums; the host adds them in float64.
The states are stored back, so a second launch continues the same streams. Without a GPU
the same kernels run on the CPU simulator at a small size, with a notice.

    python3 examples/monte_carlo.py [--threads 65536] [--paths 256] [--seed 7]
                                    [--generator xoshiro128++]
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np

from _common import on_gpu, parser, simulator_size

import cupric
from cupric.device import grid
from cupric.gpu_rand import Generator
from cupric.gpu_rand.device_rng import device_rng
from cupric.types import f32, i32

#: Threads x paths the simulator runs in a few seconds.
SIMULATOR_MAX_THREADS = 512
SIMULATOR_MAX_PATHS = 64

GENERATOR = "xoshiro128++"
RNG = device_rng(GENERATOR)  # the module-level default; --generator builds its own


def make_kernels(rng):
    """The two kernels for one generator's device functions (`rng`)."""

    @cupric.kernel
    def pi_hits(states, paths, hits):
        """hits[t]: how many of thread t's `paths` points of [0, 1)^2 fall in the circle."""
        t = grid(1)
        if t < hits.size:
            st = rng.load(states, t)
            count = i32(0)
            for _ in range(paths):
                x, st = rng.uniform_f32(st)
                y, st = rng.uniform_f32(st)
                if x * x + y * y < f32(1.0):
                    count += 1
            hits[t] = count
            rng.store(states, t, st)

    @cupric.kernel
    def call_payoffs(states, paths, spot, strike, drift, vol, sums):
        """sums[0, t], sums[1, t]: the sum and sum of squares of thread t's discounted-free
        call payoffs max(S_T - K, 0), S_T = spot * exp(drift + vol * Z), Z normal (both
        values of each Box–Muller pair used: `paths` is even)."""
        t = grid(1)
        if t < sums.shape[1]:
            st = rng.load(states, t)
            total = f32(0.0)
            squares = f32(0.0)
            for _ in range(paths // 2):
                z0, z1, st = rng.normal2_f32(st)
                p0 = max(spot * math.exp(drift + vol * z0) - strike, f32(0.0))
                p1 = max(spot * math.exp(drift + vol * z1) - strike, f32(0.0))
                total += p0 + p1
                squares += p0 * p0 + p1 * p1
            sums[0, t] = total
            sums[1, t] = squares
            rng.store(states, t, st)

    return pi_hits, call_payoffs


def black_scholes_call(spot, strike, rate, vol, years) -> float:
    """The closed-form price of a European call (no dividends)."""
    d1 = (math.log(spot / strike) + (rate + vol * vol / 2) * years) / (vol * math.sqrt(years))
    d2 = d1 - vol * math.sqrt(years)
    cdf = lambda x: 0.5 * math.erfc(-x / math.sqrt(2.0))  # noqa: E731
    return spot * cdf(d1) - strike * math.exp(-rate * years) * cdf(d2)


def main() -> int:
    args_parser = parser(__doc__)
    args_parser.add_argument("--threads", type=int, default=None,
                             help="GPU threads = gpu_rand streams (default 65536 on a GPU)")
    args_parser.add_argument("--paths", type=int, default=None,
                             help="draws per thread, even (default 256 on a GPU)")
    args_parser.add_argument("--seed", type=int, default=7)
    args_parser.add_argument("--generator", default=GENERATOR,
                             help="any gpu_rand generator name (default xoshiro128++)")
    args = args_parser.parse_args()
    for flag in ("threads", "paths"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            args_parser.error(f"--{flag} must be positive")
    if args.paths is not None and args.paths % 2:
        args_parser.error("--paths must be even (normal values come in pairs)")
    gpu = on_gpu("the Monte-Carlo kernels")
    if gpu:
        threads, paths = args.threads or 65536, args.paths or 256
    else:
        threads = simulator_size("--threads", args.threads, 256, SIMULATOR_MAX_THREADS,
                                 script="monte_carlo.py")
        paths = simulator_size("--paths", args.paths, 32, SIMULATOR_MAX_PATHS,
                               script="monte_carlo.py")
    try:
        rng = RNG if args.generator == GENERATOR else device_rng(args.generator)
    except KeyError as exc:
        args_parser.error(str(exc))
    pi_hits, call_payoffs = make_kernels(rng)
    generator = Generator(args.seed, algorithm=rng.name, streams=threads)

    if gpu:
        from cupric.gpu_rand.backends import CudaBackend
        from cupric.runtime.memory import empty
        states = generator.device_states(CudaBackend())
        hits, sums = empty(threads, np.int32), empty((2, threads), np.float32)
        fetch = lambda a: a.to_numpy()  # noqa: E731
    else:
        states = generator.stream_states
        hits, sums = np.zeros(threads, np.int32), np.zeros((2, threads), np.float32)
        fetch = lambda a: a  # noqa: E731
    launch = ((threads + 127) // 128, 128)

    t0 = time.perf_counter()
    pi_hits[launch](states, paths, hits)
    inside = int(fetch(hits).astype(np.int64).sum())
    n = threads * paths
    estimate = 4.0 * inside / n
    error = 4.0 * math.sqrt(inside / n * (1 - inside / n) / n)
    print(f"pi      ~ {estimate:.6f} +- {error:.6f} ({n} points; math.pi = {math.pi:.6f})")

    spot, strike, rate, vol, years = 100.0, 105.0, 0.03, 0.2, 1.0
    drift = (rate - vol * vol / 2) * years
    call_payoffs[launch](states, paths, f32(spot), f32(strike), f32(drift),
                         f32(vol * math.sqrt(years)), sums)
    partial = fetch(sums).astype(np.float64)
    mean = partial[0].sum() / n
    var = max(partial[1].sum() / n - mean * mean, 0.0)
    discount = math.exp(-rate * years)
    price, std_error = discount * mean, discount * math.sqrt(var / n)
    exact = black_scholes_call(spot, strike, rate, vol, years)
    seconds = time.perf_counter() - t0
    print(f"call    ~ {price:.4f} +- {std_error:.4f} ({n} paths; Black-Scholes {exact:.4f})")
    print(f"{'GPU' if gpu else 'simulator'}: {threads} threads x {paths} draws of "
          f"{rng.name}, {seconds:.2f} s with compilation")
    within = abs(price - exact) <= 5 * std_error and abs(estimate - math.pi) <= 5 * error
    if not within:
        print("the estimates are more than 5 standard errors off", file=sys.stderr)
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())

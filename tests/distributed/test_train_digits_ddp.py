"""examples/train_digits_ddp.py: data-parallel training with NCCL.

CPU lane: options, the layer buckets over the flat gradient buffer, the shards of each
global batch, the reducer's stream/event choreography against fakes, and the no-GPU
notice. GPU lane (one GPU): the script with world size 1 trains to >= 97 % with
overlapped buckets and without, under torchrun too, and its epoch time is compared with
train_digits' one-GPU loop in the same run.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "train_digits_ddp.py"


def _load():
    spec = importlib.util.spec_from_file_location("cupric_example_train_digits_ddp",
                                                  SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ddp = _load()
td = ddp.td


def test_options():
    args = ddp.parse_args(["--epochs", "3", "--batch-size", "64"])
    assert (args.epochs, args.batch_size, args.overlap, args.compare_single) == (
        3, 64, True, False)
    args = ddp.parse_args(["--no-overlap", "--compare-single", "--optimizer", "sgd"])
    assert not args.overlap and args.compare_single and args.lr == pytest.approx(0.05)


def test_graph_is_refused(capsys):
    with pytest.raises(SystemExit) as info:
        ddp.parse_args(["--graph"])
    assert info.value.code == 2 and "--graph" in capsys.readouterr().err


def test_buckets_cover_the_gradient_buffer_last_layer_first():
    buckets = ddp.layer_buckets()
    layout, total = td.parameter_layout()
    assert [b[0] for b in buckets] == ["fc", "conv2", "conv1"]
    spans = sorted((start, stop) for _layer, start, stop in buckets)
    assert spans[0][0] == 0 and spans[-1][1] == total
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))      # no gap, no overlap
    for name, (offset, shape) in layout.items():
        layer, start, stop = next(b for b in buckets if b[0] == name.split(".")[0])
        assert start <= offset and offset + int(np.prod(shape)) <= stop, name


@pytest.mark.parametrize("world", [1, 2, 3, 8])
def test_shards_partition_every_global_batch(world):
    orders = td.batch_orders(70, 32, epochs=2, seed=0)
    shards = [ddp.shard_orders(orders, r, world) for r in range(world)]
    for e, batches in enumerate(orders):
        for b, idx in enumerate(batches):
            parts = [shards[r][e][b] for r in range(world)]
            assert sorted(np.concatenate(parts)) == sorted(idx)
            assert max(map(len, parts)) - min(map(len, parts)) <= 1


class _Recorder:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def record(self, stream):
        self.log.append(("record", self.name, stream.name))

    def wait_event(self, event):
        self.log.append(("wait", self.name, event.name))

    def close(self):
        self.log.append(("close", self.name))

    def synchronize(self):
        self.log.append(("sync", self.name))


class _FakeDevice:
    def __init__(self, log):
        self.log, self.events = log, 0

    def create_stream(self, non_blocking=False):
        return _Recorder(self.log, "comm")

    def create_event(self, timing=True):
        self.events += 1
        return _Recorder(self.log, f"event{self.events}")


class _FakeComm:
    def __init__(self, log):
        self.log = log
        self.device = _FakeDevice(log)

    def all_reduce(self, buf, op, stream):
        self.log.append(("all_reduce", buf, op, stream.name))


def test_reducer_overlaps_each_bucket_after_its_gradients():
    log = []
    grads = np.arange(6272)
    train = _Recorder(log, "train")
    reducer = ddp.GradientReducer(_FakeComm(log), grads, ddp.layer_buckets(), train)
    for k in range(3):
        reducer.ready(k)
    reducer.finish()
    steps = [entry for entry in log]
    # per bucket: event recorded on the training stream, comm stream waits, all-reduce
    for k in range(3):
        rec, wait, reduce_ = steps[3 * k: 3 * k + 3]
        assert rec == ("record", f"event{k + 1}", "train")
        assert wait == ("wait", "comm", f"event{k + 1}")
        assert reduce_[0] == "all_reduce" and reduce_[2:] == ("sum", "comm")
    assert [len(s[1]) for s in steps if s[0] == "all_reduce"] == [1344, 4672, 256]
    assert steps[-2:] == [("record", "event4", "comm"), ("wait", "train", "event4")]


def test_reducer_without_overlap_reduces_the_whole_buffer_on_the_training_stream():
    log = []
    grads = np.arange(6272)
    reducer = ddp.GradientReducer(_FakeComm(log), grads, ddp.layer_buckets(),
                                  _Recorder(log, "train"), overlap=False)
    for k in range(3):
        reducer.ready(k)
    reducer.finish()
    assert len(log) == 1 and log[0][0] == "all_reduce" and log[0][1] is grads
    assert log[0][2:] == ("sum", "train")


def _run(*args, env_extra=None, timeout=400, module=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(env_extra or {})
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK",
                 "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID",
                 "SLURM_NTASKS"):
        if name not in (env_extra or {}):
            env.pop(name, None)
    command = [sys.executable, *(["-m", module] if module else []), *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_without_a_gpu_it_says_so():
    proc = _run(str(SCRIPT), "--epochs", "1", env_extra={"CUPRIC_SIMULATOR": "1"})
    assert proc.returncode == 0
    assert "notice:" in proc.stderr and "nothing was trained" in proc.stderr


def _accuracy(stdout, label):
    match = re.search(rf"^{re.escape(label)}: final test accuracy ([0-9.]+)", stdout, re.M)
    assert match, stdout
    return float(match.group(1))


@pytest.mark.gpu
@pytest.mark.parametrize("overlap", [True, False])
def test_world_size_one_trains_like_one_gpu(tmp_path, overlap):
    pytest.importorskip("sklearn", reason="scikit-learn is not installed")
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    flags = [] if overlap else ["--no-overlap"]
    proc = _run(str(SCRIPT), "--epochs", "20", "--check", "--no-progress",
                "--compare-single", "--plot", str(tmp_path / "ddp.png"), *flags)
    print(proc.stdout[-5000:])
    print(proc.stderr[-3000:], file=sys.stderr)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "world size 1" in proc.stdout
    assert "parameters identical on every rank: True" in proc.stdout
    ddp_acc, single_acc = _accuracy(proc.stdout, "ddp x1"), _accuracy(proc.stdout, "single")
    assert ddp_acc >= 0.97
    # Same weights, same batches, gradients scaled by the same batch: the one-rank
    # all-reduce changes nothing, so the two runs land on the same accuracy.
    assert abs(ddp_acc - single_acc) <= 0.01
    ratio = float(re.search(r"single-GPU loop median epoch: ([0-9.]+)", proc.stdout)
                  .group(1))
    assert ratio > 0
    assert (tmp_path / "ddp.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.gpu
def test_under_torchrun_with_one_process(tmp_path):
    pytest.importorskip("torch", reason="PyTorch (torchrun) is not installed")
    pytest.importorskip("sklearn", reason="scikit-learn is not installed")
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    proc = _run("--nproc-per-node", "1", "--standalone", str(SCRIPT), "--epochs", "3",
                "--no-progress", "--plot", str(tmp_path / "p.png"),
                module="torch.distributed.run")
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "world size 1 (torchrun" in proc.stdout

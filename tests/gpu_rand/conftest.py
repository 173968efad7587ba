"""Fixtures shared by the gpu_rand tests."""

from __future__ import annotations

import sys
import types

import pytest

from cupric.runtime import array_adapters as aa

_TYPESTRS = {"float32": "<f4", "float64": "<f8", "int64": "<i8", "int32": "<i4",
             "uint32": "<u4", "uint64": "<u8", "bfloat16": "<V2"}


class _TorchDtype:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"torch.{self.name}"


@pytest.fixture
def fake_torch(monkeypatch):
    """A ``torch`` module whose ``Tensor`` the PyTorch adapter recognizes; each tensor is
    host memory (a NumPy array) standing in for device memory: ``Tensor(host, dtype)``,
    `dtype` a name (default: the host array's)."""
    torch = types.ModuleType("torch")
    torch.strided = object()
    for name in _TYPESTRS:
        setattr(torch, name, _TorchDtype(name))
    torch._tensor = types.SimpleNamespace(_dtype_to_typestr=lambda d: _TYPESTRS[d.name])

    def __init__(self, host, dtype=None):
        self.host, self.dtype, self.shape = host, getattr(torch, dtype or str(host.dtype)), \
            host.shape
        self.is_cuda, self.requires_grad, self.layout = True, False, torch.strided

    tensor = type("Tensor", (), {
        "__module__": "torch", "__init__": __init__,
        "stride": lambda self: tuple(s // self.host.itemsize for s in self.host.strides),
        "is_contiguous": lambda self: self.host.flags.c_contiguous,
        "numel": lambda self: self.host.size,
        "data_ptr": lambda self: self.host.ctypes.data,
        "get_device": lambda self: 0})
    torch.Tensor = tensor
    monkeypatch.setitem(sys.modules, "torch", torch)
    yield torch
    aa.unregister_array_adapter(tensor)

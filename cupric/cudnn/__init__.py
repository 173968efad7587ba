"""cupric.cudnn: NVIDIA's deep-learning primitives, cuDNN 9.

Handles per stream; convolutions (forward, backward-data, backward-filter, fused bias and
activation) and matmul through the cuDNN graph API with heuristics, autotuning and plans
cached per shape; pooling, activations, softmax, batch normalization and dropout through
the legacy entry points where the graph API has no engine (docs/cudnn.md says which and
why). `cupric.cudnn.lib` holds the low-level bindings generated from the installed
headers on first use; importing this package loads nothing.
"""

from __future__ import annotations

import importlib

from .._lazy import attach

_API = (
    "Handle", "default_handle", "PlanOptions", "Plan", "GraphSpec", "NoEngineError",
    "Conv", "conv", "conv2d", "conv_forward", "conv_backward_data", "conv_backward_filter",
    "conv_backward_bias", "conv_bias_activation", "conv_output_shape", "matmul",
    "Pool", "pool_forward", "pool_backward", "max_pool2d", "avg_pool2d", "pool_output_shape",
    "activation_forward", "activation_backward", "relu", "sigmoid", "tanh", "elu", "swish",
    "gelu", "softmax_forward", "softmax_backward", "softmax", "log_softmax",
    "BatchNormResult", "batch_norm_training", "batch_norm_inference", "batch_norm_backward",
    "batch_norm", "Dropout", "dropout", "tensor_descriptor_of", "backend_tensor_of",
)

__all__ = ["lib", "is_available", "CudnnError", "release_idle_handles", *_API]

__getattr__, __dir__ = attach(__name__, globals(), {
    "lib": ("cupric.cudnn.lib", None),
    "CudnnError": ("cupric.cudnn.lib", "CudnnError"),
    "release_idle_handles": ("cupric.cudnn.handle", "release_idle_handles"),
    **{name: ("cupric.cudnn.api", name) for name in _API},
})


def is_available() -> bool:
    """Whether cuDNN can be loaded (``pip install nvidia-cudnn-cu13`` otherwise)."""
    return importlib.import_module("cupric.cudnn.lib").is_available()

"""The public surface of cupric.cudnn: handles, convolutions, pooling, activations,
softmax, batch normalization, dropout and graph-built matmul.

Every function takes device arrays from any library (PyTorch, CuPy, cupric), checks
layouts, element types and shapes before calling cuDNN - an error names the operation
and the mismatch - and allocates its output with cupric.runtime when ``out`` is None.
Work is queued on the stream of the handle (the shared handle of ``stream=``, by
default the legacy default stream that PyTorch also uses).
"""

from __future__ import annotations

from .activation import (activation_backward, activation_forward, elu, gelu, relu, sigmoid,
                         swish, tanh)
from .batchnorm import (BatchNormResult, batch_norm, batch_norm_backward,
                        batch_norm_inference, batch_norm_training)
from .conv import (Conv, conv, conv2d, conv_backward_bias, conv_backward_data,
                   conv_backward_filter, conv_bias_activation, conv_forward,
                   conv_output_shape)
from .descriptors import backend_tensor_of, tensor_descriptor_of
from .dropout import Dropout, dropout
from .graph import GraphSpec, NoEngineError
from .graph_matmul import matmul
from .handle import Handle, default_handle
from .plans import Plan, PlanOptions
from .pooling import (Pool, avg_pool2d, max_pool2d, pool_backward, pool_forward,
                      pool_output_shape)
from .softmax import log_softmax, softmax, softmax_backward, softmax_forward

__all__ = [
    "Handle", "default_handle", "PlanOptions", "Plan", "GraphSpec", "NoEngineError",
    "Conv", "conv", "conv2d", "conv_forward", "conv_backward_data", "conv_backward_filter",
    "conv_backward_bias", "conv_bias_activation", "conv_output_shape", "matmul",
    "Pool", "pool_forward", "pool_backward", "max_pool2d", "avg_pool2d", "pool_output_shape",
    "activation_forward", "activation_backward", "relu", "sigmoid", "tanh", "elu", "swish",
    "gelu",
    "softmax_forward", "softmax_backward", "softmax", "log_softmax",
    "BatchNormResult", "batch_norm_training", "batch_norm_inference", "batch_norm_backward",
    "batch_norm",
    "Dropout", "dropout",
    "tensor_descriptor_of", "backend_tensor_of",
]

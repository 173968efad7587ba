"""The cuDNN backend (graph) API, one Pythonic layer thick: typed descriptors.

Every object of the graph API - tensor, convolution, operation, operation graph, engine
heuristics, engine configuration, execution plan, variant pack - is an opaque
``cudnnBackendDescriptor_t`` of one type, filled by setting typed attributes, then
*finalized* (validated and frozen). `Descriptor` owns one, knows each attribute's C type
so that a value is packed once and correctly, and keeps the descriptors an attribute
refers to alive as long as it lives.
"""

from __future__ import annotations

import operator

from cupric.runtime.errors import ClosedError
from cupric.runtime.resource import Resource

__all__ = ["Descriptor", "ATTRIBUTE_TYPES", "attribute_type", "DESCRIPTOR_TYPES",
           "last_error"]

# Attribute suffix (after CUDNN_ATTR_) -> attribute value type (after CUDNN_TYPE_), for
# the attributes cupric sets or reads. The C API checks the type too; declaring it here
# lets a value be packed without asking, and a wrong Python value fail with the
# attribute's name before any call.
ATTRIBUTE_TYPES: dict[str, str] = {
    # tensors
    "TENSOR_DATA_TYPE": "DATA_TYPE", "TENSOR_DIMENSIONS": "INT64",
    "TENSOR_STRIDES": "INT64", "TENSOR_UNIQUE_ID": "INT64",
    "TENSOR_BYTE_ALIGNMENT": "INT64", "TENSOR_IS_VIRTUAL": "BOOLEAN",
    "TENSOR_IS_BY_VALUE": "BOOLEAN",
    # convolution
    "CONVOLUTION_COMP_TYPE": "DATA_TYPE", "CONVOLUTION_CONV_MODE": "CONVOLUTION_MODE",
    "CONVOLUTION_SPATIAL_DIMS": "INT64", "CONVOLUTION_DILATIONS": "INT64",
    "CONVOLUTION_FILTER_STRIDES": "INT64", "CONVOLUTION_PRE_PADDINGS": "INT64",
    "CONVOLUTION_POST_PADDINGS": "INT64",
    "OPERATION_CONVOLUTION_FORWARD_ALPHA": "FLOAT_OR_DOUBLE",
    "OPERATION_CONVOLUTION_FORWARD_BETA": "FLOAT_OR_DOUBLE",
    "OPERATION_CONVOLUTION_FORWARD_CONV_DESC": "BACKEND_DESCRIPTOR",
    "OPERATION_CONVOLUTION_FORWARD_W": "BACKEND_DESCRIPTOR",
    "OPERATION_CONVOLUTION_FORWARD_X": "BACKEND_DESCRIPTOR",
    "OPERATION_CONVOLUTION_FORWARD_Y": "BACKEND_DESCRIPTOR",
    "OPERATION_CONVOLUTION_BWD_DATA_ALPHA": "FLOAT_OR_DOUBLE",
    "OPERATION_CONVOLUTION_BWD_DATA_BETA": "FLOAT_OR_DOUBLE",
    "OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC": "BACKEND_DESCRIPTOR",
    "OPERATION_CONVOLUTION_BWD_DATA_W": "BACKEND_DESCRIPTOR",
    "OPERATION_CONVOLUTION_BWD_DATA_DX": "BACKEND_DESCRIPTOR",
    "OPERATION_CONVOLUTION_BWD_DATA_DY": "BACKEND_DESCRIPTOR",
    "OPERATION_CONVOLUTION_BWD_FILTER_ALPHA": "FLOAT_OR_DOUBLE",
    "OPERATION_CONVOLUTION_BWD_FILTER_BETA": "FLOAT_OR_DOUBLE",
    "OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC": "BACKEND_DESCRIPTOR",
    "OPERATION_CONVOLUTION_BWD_FILTER_DW": "BACKEND_DESCRIPTOR",
    "OPERATION_CONVOLUTION_BWD_FILTER_X": "BACKEND_DESCRIPTOR",
    "OPERATION_CONVOLUTION_BWD_FILTER_DY": "BACKEND_DESCRIPTOR",
    # pointwise
    "POINTWISE_MODE": "POINTWISE_MODE", "POINTWISE_MATH_PREC": "DATA_TYPE",
    "POINTWISE_RELU_LOWER_CLIP": "DOUBLE", "POINTWISE_RELU_UPPER_CLIP": "DOUBLE",
    "POINTWISE_RELU_LOWER_CLIP_SLOPE": "DOUBLE", "POINTWISE_ELU_ALPHA": "DOUBLE",
    "POINTWISE_SOFTPLUS_BETA": "DOUBLE", "POINTWISE_SWISH_BETA": "DOUBLE",
    "OPERATION_POINTWISE_PW_DESCRIPTOR": "BACKEND_DESCRIPTOR",
    "OPERATION_POINTWISE_XDESC": "BACKEND_DESCRIPTOR",
    "OPERATION_POINTWISE_BDESC": "BACKEND_DESCRIPTOR",
    "OPERATION_POINTWISE_YDESC": "BACKEND_DESCRIPTOR",
    "OPERATION_POINTWISE_DXDESC": "BACKEND_DESCRIPTOR",
    "OPERATION_POINTWISE_DYDESC": "BACKEND_DESCRIPTOR",
    "OPERATION_POINTWISE_ALPHA1": "FLOAT_OR_DOUBLE",
    "OPERATION_POINTWISE_ALPHA2": "FLOAT_OR_DOUBLE",
    # matmul
    "MATMUL_COMP_TYPE": "DATA_TYPE",
    "OPERATION_MATMUL_ADESC": "BACKEND_DESCRIPTOR",
    "OPERATION_MATMUL_BDESC": "BACKEND_DESCRIPTOR",
    "OPERATION_MATMUL_CDESC": "BACKEND_DESCRIPTOR",
    "OPERATION_MATMUL_DESC": "BACKEND_DESCRIPTOR",
    # graphs, engines, plans
    "OPERATIONGRAPH_HANDLE": "HANDLE", "OPERATIONGRAPH_OPS": "BACKEND_DESCRIPTOR",
    "OPERATIONGRAPH_ENGINE_GLOBAL_COUNT": "INT64",
    "ENGINEHEUR_OPERATION_GRAPH": "BACKEND_DESCRIPTOR", "ENGINEHEUR_MODE": "HEUR_MODE",
    "ENGINEHEUR_RESULTS": "BACKEND_DESCRIPTOR",
    "ENGINECFG_ENGINE": "BACKEND_DESCRIPTOR", "ENGINECFG_KNOB_CHOICES": "BACKEND_DESCRIPTOR",
    "ENGINE_OPERATION_GRAPH": "BACKEND_DESCRIPTOR", "ENGINE_GLOBAL_INDEX": "INT64",
    "ENGINE_NUMERICAL_NOTE": "NUMERICAL_NOTE", "ENGINE_BEHAVIOR_NOTE": "BEHAVIOR_NOTE",
    "KNOB_CHOICE_KNOB_TYPE": "KNOB_TYPE", "KNOB_CHOICE_KNOB_VALUE": "INT64",
    "EXECUTION_PLAN_HANDLE": "HANDLE", "EXECUTION_PLAN_ENGINE_CONFIG": "BACKEND_DESCRIPTOR",
    "EXECUTION_PLAN_WORKSPACE_SIZE": "INT64",
    "EXECUTION_PLAN_JSON_REPRESENTATION": "CHAR",
    "VARIANT_PACK_UNIQUE_IDS": "INT64", "VARIANT_PACK_DATA_POINTERS": "VOID_PTR",
    "VARIANT_PACK_WORKSPACE": "VOID_PTR",
}

# Descriptor type suffixes (after CUDNN_BACKEND_, before _DESCRIPTOR) cupric creates.
DESCRIPTOR_TYPES = (
    "TENSOR", "CONVOLUTION", "POINTWISE", "MATMUL", "OPERATION_CONVOLUTION_FORWARD",
    "OPERATION_CONVOLUTION_BACKWARD_DATA", "OPERATION_CONVOLUTION_BACKWARD_FILTER",
    "OPERATION_POINTWISE", "OPERATION_MATMUL", "OPERATIONGRAPH", "ENGINEHEUR", "ENGINECFG",
    "ENGINE", "EXECUTION_PLAN", "VARIANT_PACK", "KNOB_CHOICE",
)

# C element type of each attribute value type (enums travel as their enum types, which
# cffi packs as ints).
_CTYPES = {
    "INT64": "int64_t", "DOUBLE": "double", "FLOAT": "float", "BOOLEAN": "bool",
    "VOID_PTR": "void *", "HANDLE": "cudnnHandle_t", "DATA_TYPE": "cudnnDataType_t",
    "CONVOLUTION_MODE": "cudnnConvolutionMode_t", "HEUR_MODE": "cudnnBackendHeurMode_t",
    "POINTWISE_MODE": "cudnnPointwiseMode_t",
    "NUMERICAL_NOTE": "cudnnBackendNumericalNote_t",
    "BEHAVIOR_NOTE": "cudnnBackendBehaviorNote_t", "KNOB_TYPE": "cudnnBackendKnobType_t",
    "BACKEND_DESCRIPTOR": "cudnnBackendDescriptor_t", "CHAR": "char",
}


def attribute_type(attribute: str) -> str:
    """The value type (``"INT64"``, ``"BACKEND_DESCRIPTOR"``...) of an attribute suffix.

    Raises
    ------
    KeyError
        For an attribute cupric does not declare (add it to `ATTRIBUTE_TYPES`).
    """
    try:
        return ATTRIBUTE_TYPES[attribute]
    except KeyError:
        raise KeyError(f"cuDNN attribute CUDNN_ATTR_{attribute} is not declared in "
                       f"cupric.cudnn.backend.ATTRIBUTE_TYPES") from None


def _lib():
    from . import lib
    return lib


def last_error() -> str:
    """cuDNN's message for the last failing call of this thread (``cudnnGetLastErrorString``),
    empty when there is none."""
    lib = _lib()
    ffi = lib.ffi
    buf = ffi.new("char[1024]")
    lib.lib.cudnnGetLastErrorString(buf, 1024)
    return ffi.string(buf).decode(errors="replace")


def check(status: int, what: str) -> None:
    """`lib.check`, with cuDNN's own last message appended to the error's text: for the
    backend API it is the only place that says which attribute was wrong."""
    if status == 0:
        return
    lib = _lib()
    try:
        lib.check(status)
    except lib.CudnnError as exc:
        detail = last_error()
        if detail:
            exc.args = (f"{exc.args[0] if exc.args else exc} [{what}: {detail}]",
                        *exc.args[1:])
        else:
            exc.args = (f"{exc.args[0] if exc.args else exc} [{what}]", *exc.args[1:])
        raise


def _destroy(raw: int) -> None:
    lib = _lib()
    fn = lib.lib.cudnnBackendDestroyDescriptor
    lib.check(fn(lib.ffi.cast("cudnnBackendDescriptor_t", raw)))


class Descriptor(Resource):
    """One owned ``cudnnBackendDescriptor_t`` (no public constructor: `Descriptor.create`).

    Examples
    --------
    >>> t = Descriptor.create("TENSOR")                              # doctest: +SKIP
    >>> t.set("TENSOR_DATA_TYPE", "f32")
    >>> t.set("TENSOR_DIMENSIONS", [8, 64, 56, 56])
    >>> t.finalize()

    Thread safety
    -------------
    Building (set/finalize) is for one thread. A finalized descriptor is read-only and
    may be used from several threads (an execution plan is executed concurrently by
    cuDNN's own frontend too).
    """

    __slots__ = ("_ptr", "kind", "_keep", "finalized")

    def __init__(self, *args, **kwargs):
        raise TypeError("cudnn backend descriptors have no public constructor; use "
                        "Descriptor.create(kind)")

    @classmethod
    def create(cls, kind: str) -> "Descriptor":
        """A new descriptor of type ``CUDNN_BACKEND_<kind>_DESCRIPTOR``.

        Raises
        ------
        ValueError
            For an unknown kind.
        CudnnError
            If cuDNN cannot create it.
        """
        if kind not in DESCRIPTOR_TYPES:
            raise ValueError(f"unknown cuDNN backend descriptor kind {kind!r}; known: "
                             f"{', '.join(DESCRIPTOR_TYPES)}")
        lib = _lib()
        ffi = lib.ffi
        out = ffi.new("cudnnBackendDescriptor_t *")
        code = getattr(lib.lib, f"CUDNN_BACKEND_{kind}_DESCRIPTOR")
        check(lib.lib.cudnnBackendCreateDescriptor(code, out), f"create {kind}")
        raw = int(ffi.cast("uintptr_t", out[0]))
        self = cls.__new__(cls)
        self._ptr = raw
        self.kind = kind
        self._keep = []
        self.finalized = False
        self._init_resource(raw, _destroy)
        return self

    def _label(self) -> str:
        return f"cuDNN backend {self.kind} descriptor"

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("finalized" if self.finalized else "open")
        return f"<cupric.cudnn.backend.Descriptor {self.kind} {state}>"

    @property
    def raw(self):
        """The descriptor as a cffi ``cudnnBackendDescriptor_t``."""
        if self._closed:
            raise ClosedError(f"this cuDNN {self.kind} descriptor is closed")
        return _lib().ffi.cast("cudnnBackendDescriptor_t", self._ptr)

    # -- attributes ----------------------------------------------------------------------

    def _pack(self, attribute: str, vtype: str, value):
        """(C type name, cffi array, count, objects to keep alive) of a value."""
        lib = _lib()
        ffi = lib.ffi
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        keep = []
        if vtype == "FLOAT_OR_DOUBLE":
            # Scaling factors: cuDNN takes float for float/half data, double for double
            # compute; cupric passes doubles only where the compute type is double.
            vtype = "DOUBLE" if any(isinstance(v, _Double) for v in values) else "FLOAT"
            values = [float(v) for v in values]
        if vtype == "BACKEND_DESCRIPTOR":
            raws = []
            for v in values:
                if not isinstance(v, Descriptor):
                    raise TypeError(f"CUDNN_ATTR_{attribute} takes backend descriptors, "
                                    f"got {type(v).__name__}")
                raws.append(v.raw)
                keep.append(v)
            values = raws
        elif vtype == "DATA_TYPE":
            from ._validate import DATA_TYPES
            values = [DATA_TYPES[v] if isinstance(v, str) else int(v) for v in values]
        elif vtype in ("HANDLE", "VOID_PTR"):
            values = [ffi.cast(_CTYPES[vtype], int(v)) for v in values]
        elif vtype == "BOOLEAN":
            values = [bool(v) for v in values]
        elif vtype in ("DOUBLE", "FLOAT"):
            values = [float(v) for v in values]
        else:
            try:
                values = [operator.index(v) for v in values]
            except TypeError:
                raise TypeError(f"CUDNN_ATTR_{attribute} takes integers ({vtype}), got "
                                f"{value!r}") from None
        ctype = _CTYPES[vtype]
        array = ffi.new(f"{ctype}[]", values) if values else ffi.NULL
        return vtype, array, len(values), keep

    def set(self, attribute: str, value) -> None:
        """Set ``CUDNN_ATTR_<attribute>`` to `value` (a scalar or a sequence).

        Values by attribute type: ints for INT64 and enums, element type names ("f32")
        or ints for DATA_TYPE, `Descriptor` objects for BACKEND_DESCRIPTOR (kept alive by
        this one), ints (addresses) for HANDLE and VOID_PTR, floats for scaling factors
        (`double` wraps one to send it as a C double).

        Raises
        ------
        KeyError
            For an attribute not in `ATTRIBUTE_TYPES`.
        TypeError
            For a value of the wrong kind.
        CudnnError
            When cuDNN refuses it (its message is appended).
        """
        if self.finalized:
            raise ValueError(f"the cuDNN {self.kind} descriptor is finalized; attributes "
                             f"can no longer be set")
        vtype = attribute_type(attribute)
        lib = _lib()
        packed_type, array, count, keep = self._pack(attribute, vtype, value)
        name = getattr(lib.lib, f"CUDNN_ATTR_{attribute}")
        type_code = getattr(lib.lib, f"CUDNN_TYPE_{packed_type}")
        check(lib.lib.cudnnBackendSetAttribute(self.raw, name, type_code, count, array),
              f"set CUDNN_ATTR_{attribute} of {self.kind}")
        self._keep.extend(keep)

    def finalize(self) -> None:
        """Validate and freeze the descriptor (``cudnnBackendFinalize``).

        Raises
        ------
        CudnnError
            ``CUDNN_STATUS_NOT_SUPPORTED`` when no engine can run what it describes
            (engine configurations, plans), ``CUDNN_STATUS_BAD_PARAM`` for inconsistent
            attributes; cuDNN's message is appended.
        """
        lib = _lib()
        check(lib.lib.cudnnBackendFinalize(self.raw), f"finalize {self.kind}")
        self.finalized = True

    def get_int64(self, attribute: str, capacity: int = 1) -> list[int]:
        """Read an INT64 attribute (up to `capacity` values)."""
        return [int(v) for v in self._get(attribute, "INT64", capacity)]

    def get_enums(self, attribute: str, capacity: int = 16) -> list[int]:
        """Read an enum-array attribute (numerical or behavior notes...)."""
        return [int(v) for v in self._get(attribute, attribute_type(attribute), capacity)]

    def get_text(self, attribute: str, capacity: int = 1 << 16) -> str:
        """Read a CHAR attribute as text (e.g. the JSON of an execution plan)."""
        lib = _lib()
        values = self._get(attribute, "CHAR", capacity)
        return lib.ffi.string(values).decode(errors="replace") if values else ""

    def get_descriptors(self, attribute: str, kind: str, capacity: int) -> list["Descriptor"]:
        """Read a BACKEND_DESCRIPTOR array attribute into new descriptors of `kind`
        (cuDNN fills descriptors the caller created)."""
        lib = _lib()
        ffi = lib.ffi
        made = [Descriptor.create(kind) for _ in range(capacity)]
        array = ffi.new("cudnnBackendDescriptor_t[]", [d.raw for d in made])
        count = ffi.new("int64_t *")
        name = getattr(lib.lib, f"CUDNN_ATTR_{attribute}")
        check(lib.lib.cudnnBackendGetAttribute(
            self.raw, name, lib.lib.CUDNN_TYPE_BACKEND_DESCRIPTOR, capacity, count, array),
            f"get CUDNN_ATTR_{attribute} of {self.kind}")
        n = int(count[0])
        for extra in made[n:]:
            extra.close()
        for d in made[:n]:
            d.finalized = True  # cuDNN returns them finalized
        return made[:n]

    def _get(self, attribute: str, vtype: str, capacity: int):
        lib = _lib()
        ffi = lib.ffi
        array = ffi.new(f"{_CTYPES[vtype]}[]", max(capacity, 1))
        count = ffi.new("int64_t *")
        name = getattr(lib.lib, f"CUDNN_ATTR_{attribute}")
        type_code = getattr(lib.lib, f"CUDNN_TYPE_{vtype}")
        check(lib.lib.cudnnBackendGetAttribute(self.raw, name, type_code, capacity, count,
                                               array),
              f"get CUDNN_ATTR_{attribute} of {self.kind}")
        n = min(int(count[0]), capacity)
        if vtype == "CHAR":
            return array if n else None
        return list(array[0:n])

    def close(self) -> None:
        """Destroy the descriptor (``cudnnBackendDestroyDescriptor``) and drop the
        references it kept. A second call does nothing.

        Raises
        ------
        CudnnError
            If cuDNN refuses (the descriptor is closed anyway).
        """
        if self._closed:
            return
        try:
            super().close()
        finally:
            self._keep = []


class _Double(float):
    """A float sent as a C double where an attribute takes float or double."""

    __slots__ = ()


def double(value: float) -> float:
    """Mark a scaling factor to be passed as a C double (double-precision compute)."""
    return _Double(value)


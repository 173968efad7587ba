"""The OptiX AI denoiser: a trained network that removes Monte Carlo noise from a
rendered image, optionally guided by albedo and normal images of the same view.

A denoiser is created for a model (HDR, LDR or AOV) and guide set, then set up for a
maximum image size (state and scratch memory on the device), then invoked per image.
HDR input is first measured (average log intensity) so the network sees it in the range
it was trained on.
"""

from __future__ import annotations

import os
import re
import sys
import threading

import numpy as np

from cupric.runtime.resource import Resource

from .lib import OptixError
from .options import DenoiserOptions

__all__ = ["Denoiser", "DenoiserUnavailableError", "PIXEL_FORMATS", "image_struct",
           "denoiser_layers", "denoiser_ffi", "DEFAULT_WEIGHTS_FILE", "missing_weights_error"]

#: Where Linux drivers install the denoiser's trained weights (read by libnvoptix when a
#: denoiser is created; not part of the shared library itself).
DEFAULT_WEIGHTS_FILE = "/usr/share/nvidia/nvoptix.bin"

_OPTIX_ERROR_INTERNAL_ERROR = 7990
# OptiX 9 logs "Unable to load denoiser weights: Could not open optix denoiser weights
# file /usr/share/nvidia/nvoptix.bin" (tag DENOISER) when the file is missing.
_WEIGHTS_PATH = re.compile(r"weights file\s+(\S+)", re.IGNORECASE)


class DenoiserUnavailableError(OptixError):
    """The driver's OptiX runtime cannot create a denoiser: the trained network weights
    that it loads at creation are missing from this driver installation.

    An environment limitation, not a usage error: a driver installed without its OptiX
    data files (common in containers that mount only the compute part of the driver;
    the file comes with the ``graphics`` driver capability). `weights_file` names the file
    OptiX could not open (None when OptiX did not say), `log` holds OptiX's message.
    """

    def __init__(self, code: int, name: str, description: str,
                 weights_file: str | None = None, log: str = "") -> None:
        self.weights_file = weights_file
        self.log = log
        super().__init__(code, name, description)

    def __reduce__(self):
        return (type(self), (self.code, self.name, self.description, self.weights_file,
                             self.log))


def missing_weights_error(code: int, name: str, messages,
                          weights_exist=os.path.exists) -> DenoiserUnavailableError | None:
    """The `DenoiserUnavailableError` that explains a failed ``optixDenoiserCreate``, or
    None if the failure is not about missing weights. Needs no driver.

    Parameters
    ----------
    code, name : the OptiX result of the failed call.
    messages : list of (level, tag, text)
        What the context logged during the call.
    weights_exist : callable
        Path -> bool (a parameter for tests).
    """
    for _level, tag, text in messages:
        if "denoiser weights" not in text.lower():
            continue
        found = _WEIGHTS_PATH.search(text)
        path = found.group(1) if found else None
        where = f" ({path})" if path else ""
        return DenoiserUnavailableError(
            code, name, f"the OptiX denoiser is unavailable: this driver installation "
            f"has no denoiser weights file{where}, which OptiX loads to create a denoiser. "
            f"Install the driver's OptiX data (in a container: the 'graphics' driver "
            f"capability). OptiX logged: [{tag}] {text.strip()}", path, text.strip())
    # OptiX logs the reason at level "error"; with the context's log level below that
    # the message is lost, but an absent default file still tells.
    if code == _OPTIX_ERROR_INTERNAL_ERROR and sys.platform.startswith("linux") and \
            not weights_exist(DEFAULT_WEIGHTS_FILE):
        return DenoiserUnavailableError(
            code, name, f"the OptiX denoiser is unavailable: {DEFAULT_WEIGHTS_FILE}, the "
            f"denoiser weights file of Linux drivers, does not exist (OptiX returned "
            f"{name} without a log message at the context's log level). Install the "
            f"driver's OptiX data (in a container: the 'graphics' driver capability).",
            DEFAULT_WEIGHTS_FILE)
    return None

# OptixPixelFormat by (NumPy kind+size, channels)
PIXEL_FORMATS = {("f2", 2): 0x2207, ("f2", 3): 0x2201, ("f2", 4): 0x2202,
                 ("f4", 2): 0x2208, ("f4", 3): 0x2203, ("f4", 4): 0x2204,
                 ("u1", 3): 0x2205, ("u1", 4): 0x2206}

# Declared from the API reference (opaque in cupric.optix._declarations); enums as int.
_CDEF = """
typedef unsigned long long CUdeviceptr;

typedef struct OptixImage2D {
    CUdeviceptr data;
    unsigned int width;
    unsigned int height;
    unsigned int rowStrideInBytes;
    unsigned int pixelStrideInBytes;
    int format;
} OptixImage2D;

typedef struct OptixDenoiserOptions {
    unsigned int guideAlbedo;
    unsigned int guideNormal;
    int denoiseAlpha;
} OptixDenoiserOptions;

typedef struct OptixDenoiserSizes {
    size_t stateSizeInBytes;
    size_t withOverlapScratchSizeInBytes;
    size_t withoutOverlapScratchSizeInBytes;
    unsigned int overlapWindowSizeInPixels;
    size_t computeAverageColorSizeInBytes;
    size_t computeIntensitySizeInBytes;
    size_t internalGuideLayerPixelSizeInBytes;
} OptixDenoiserSizes;

typedef struct OptixDenoiserParams {
    CUdeviceptr hdrIntensity;
    float blendFactor;
    CUdeviceptr hdrAverageColor;
    unsigned int temporalModeUsePreviousLayers;
} OptixDenoiserParams;

typedef struct OptixDenoiserGuideLayer {
    OptixImage2D albedo;
    OptixImage2D normal;
    OptixImage2D flow;
    OptixImage2D previousOutputInternalGuideLayer;
    OptixImage2D outputInternalGuideLayer;
    OptixImage2D flowTrustworthiness;
} OptixDenoiserGuideLayer;

typedef struct OptixDenoiserLayer {
    OptixImage2D input;
    OptixImage2D previousOutput;
    OptixImage2D output;
    int type;
} OptixDenoiserLayer;
"""

_state: list = []
_lock = threading.Lock()


def denoiser_ffi():
    """The cffi FFI holding the denoiser declarations (made on first use)."""
    if not _state:
        with _lock:
            if not _state:
                import cffi
                ffi = cffi.FFI()
                ffi.cdef(_CDEF)
                _state.append(ffi)
    return _state[0]


def image_struct(image, what: str, struct=None):
    """Fill (or make) an ``OptixImage2D`` for a device image of shape (height, width,
    channels); returns (struct, (height, width), owner).

    Raises
    ------
    TypeError, ValueError
        Host arrays, unsupported dtype/channel counts, rows that are not packed pixels.
    """
    from .structs import device_view
    view = device_view(image, what)
    if len(view.shape) != 3:
        raise ValueError(f"{what} must have shape (height, width, channels), got {view.shape}")
    height, width, channels = view.shape
    key = (f"{view.dtype.kind}{view.dtype.itemsize}", channels)
    if key not in PIXEL_FORMATS:
        raise ValueError(f"{what}: {channels} channels of {view.dtype} is not an OptiX pixel "
                         f"format (float32/float16 with 2-4 channels, uint8 with 3-4)")
    if height < 1 or width < 1:
        raise ValueError(f"{what} is empty")
    if view.strides[2] != view.dtype.itemsize:
        raise ValueError(f"{what}: channels of a pixel must be contiguous")
    pixel = view.strides[1] if width > 1 else channels * view.dtype.itemsize
    row = view.strides[0] if height > 1 else pixel * width
    if pixel < channels * view.dtype.itemsize or row < pixel * width:
        raise ValueError(f"{what}: pixels or rows overlap (strides {view.strides})")
    if struct is None:
        struct = denoiser_ffi().new("OptixImage2D *")
    struct.data = view.ptr
    struct.width = width
    struct.height = height
    struct.rowStrideInBytes = row
    struct.pixelStrideInBytes = pixel
    struct.format = PIXEL_FORMATS[key]
    return struct, (height, width), view.owner


def denoiser_layers(options: DenoiserOptions, max_size, color, output, albedo=None,
                    normal=None):
    """Validate the images of one invocation against the denoiser's options and set-up
    size (``(width, height)`` or None), without OptiX; returns the filled
    ``OptixDenoiserLayer`` and ``OptixDenoiserGuideLayer`` and the objects to keep alive.

    Raises
    ------
    TypeError, ValueError
        Host arrays, formats, sizes that differ or exceed the set-up size, guides missing
        or unexpected.
    """
    ffi = denoiser_ffi()
    layer = ffi.new("OptixDenoiserLayer *")
    guides = ffi.new("OptixDenoiserGuideLayer *")
    keep = [layer, guides]
    _, size, owner = image_struct(color, "color", layer.input)
    keep.append(owner)
    _, out_size, owner = image_struct(output, "output", layer.output)
    keep.append(owner)
    if out_size != size:
        raise ValueError(f"output is {out_size[1]}x{out_size[0]}, color {size[1]}x{size[0]}")
    if layer.input.format != layer.output.format:
        raise ValueError("output must have the pixel format (dtype, channels) of color")
    for name, image, wanted, target in (("albedo", albedo, options.guide_albedo,
                                         guides.albedo),
                                        ("normal", normal, options.guide_normal,
                                         guides.normal)):
        if wanted and image is None:
            raise ValueError(f"the denoiser was created with guide_{name}=True: pass "
                             f"{name}=")
        if image is not None and not wanted:
            raise ValueError(f"{name}= given, but the denoiser was created without "
                             f"guide_{name}")
        if image is not None:
            _, guide_size, owner = image_struct(image, name, target)
            keep.append(owner)
            if guide_size != size:
                raise ValueError(f"{name} is {guide_size[1]}x{guide_size[0]}, color "
                                 f"{size[1]}x{size[0]}")
    if max_size is not None and (size[1] > max_size[0] or size[0] > max_size[1]):
        raise ValueError(f"image {size[1]}x{size[0]} exceeds the set-up size "
                         f"{max_size[0]}x{max_size[1]}: call setup() again")
    return layer, guides, keep


def _destroy_denoiser(handle, context) -> None:
    from . import lib
    from .context import destroy_child
    destroy_child(lib.optixDenoiserDestroy, handle, context)


class Denoiser(Resource):
    """The OptiX AI denoiser (OptixDenoiser).

    Made by `DeviceContext.create_denoiser(DenoiserOptions(...))`; `setup` once per
    maximum image size, then `invoke` per image.

    Attributes
    ----------
    options : DenoiserOptions
    sizes : dict or None
        OptiX's memory needs for the set-up size.

    Thread safety
    -------------
    One invocation at a time per denoiser (they share state and scratch memory).
    """

    __slots__ = ("context", "options", "sizes", "_size", "_state", "_scratch",
                 "_intensity")

    def __init__(self, *args, **kwargs) -> None:
        raise TypeError("make a denoiser with DeviceContext.create_denoiser(options)")

    @classmethod
    def _create(cls, context, options) -> "Denoiser":
        from . import lib
        from .structs import foreign_pointer
        options = DenoiserOptions() if options is None else options
        if not isinstance(options, DenoiserOptions):
            raise TypeError("options must be a DenoiserOptions")
        ffi = denoiser_ffi()
        c_options = ffi.new("OptixDenoiserOptions *")
        c_options.guideAlbedo = int(options.guide_albedo)
        c_options.guideNormal = int(options.guide_normal)
        c_options.denoiseAlpha = int(options.denoise_alpha)
        out = lib.ffi.new("OptixDenoiser *")
        context.device.primary_context().make_current()
        mark = context._log.count
        result = lib.optixDenoiserCreate(context.handle, options.model_kind,
                                         foreign_pointer(c_options, "OptixDenoiserOptions *"),
                                         out)
        if result != 0:
            context._log.raise_pending()
            try:
                lib.check(result)
            except OptixError as exc:
                unavailable = missing_weights_error(exc.code, exc.name,
                                                    context._log.since(mark))
                if unavailable is None:
                    raise
                raise unavailable from exc
        self = cls.__new__(cls)
        self.context = context
        self.options = options
        self.sizes = None
        self._size = None
        self._state = self._scratch = self._intensity = None
        self._init_resource(out[0], _destroy_denoiser, context)
        context._adopt(self)
        return self

    def _label(self) -> str:
        return "OptiX Denoiser"

    def setup(self, width: int, height: int, stream=None) -> dict:
        """Allocate state and scratch memory for images up to `width` x `height` and
        initialize the network (optixDenoiserSetup).

        Cost
        ----
        Allocates device memory (tens of MB for 1080p) and runs setup work on `stream`.
        """
        from . import lib
        from .structs import foreign_pointer
        from cupric.runtime.memory import empty, stream_handle
        for name, value in (("width", width), ("height", height)):
            if isinstance(value, bool) or not isinstance(value, int) or not \
                    1 <= value <= 2**16:
                raise ValueError(f"{name} must be an int in 1..65536, got {value!r}")
        ffi = denoiser_ffi()
        sizes = ffi.new("OptixDenoiserSizes *")
        self.context._call(lib.optixDenoiserComputeMemoryResources, self.handle, width, height,
                           foreign_pointer(sizes, "OptixDenoiserSizes *"))
        self.sizes = {name: int(getattr(sizes, name)) for name in (
            "stateSizeInBytes", "withOverlapScratchSizeInBytes",
            "withoutOverlapScratchSizeInBytes", "computeIntensitySizeInBytes",
            "computeAverageColorSizeInBytes")}
        self._release_memory(stream)
        scratch_bytes = max(self.sizes["withoutOverlapScratchSizeInBytes"],
                            self.sizes["computeIntensitySizeInBytes"],
                            self.sizes["computeAverageColorSizeInBytes"], 1)
        self._state = empty(max(self.sizes["stateSizeInBytes"], 1), np.uint8, stream=stream)
        self._scratch = empty(scratch_bytes, np.uint8, stream=stream)
        # hdrIntensity is one float; hdrAverageColor three.
        self._intensity = empty(4, np.float32, stream=stream)
        c_stream = lib.ffi.cast("CUstream", stream_handle(stream))
        self.context._call(lib.optixDenoiserSetup, self.handle, c_stream, width, height,
                           self._state.ptr, self._state.nbytes, self._scratch.ptr,
                           self._scratch.nbytes)
        self._size = (width, height)
        return self.sizes

    def _release_memory(self, stream=None) -> None:
        for buffer in (self._state, self._scratch, self._intensity):
            if buffer is not None:
                buffer.close(stream=stream)
        self._state = self._scratch = self._intensity = None

    def invoke(self, color, output, *, albedo=None, normal=None, blend: float = 0.0,
               stream=None) -> None:
        """Denoise `color` into `output` (optixDenoiserInvoke).

        Parameters
        ----------
        color, output : device images, shape (height, width, 3 or 4)
            float32 or float16 (uint8 for LDR input also); HDR models take linear
            radiance, the LDR model values in [0, 1]. `output` may not alias `color`.
        albedo, normal : device images, optional
            The guides the denoiser was created for (same size as `color`).
        blend : float
            0 (fully denoised) .. 1 (the noisy input).
        stream : Stream, optional

        Raises
        ------
        ValueError
            Bad images (before OptiX), or `setup` not called.
        """
        from . import lib
        from .structs import foreign_pointer
        from cupric.runtime.memory import stream_handle
        if self._size is None:
            raise ValueError("call Denoiser.setup(width, height) before invoke()")
        if not isinstance(blend, (int, float)) or isinstance(blend, bool) or \
                not 0.0 <= blend <= 1.0:
            raise ValueError(f"blend must be a number in 0..1, got {blend!r}")
        layer, guides, keep = denoiser_layers(self.options, self._size, color, output,
                                             albedo, normal)
        if layer.input.data == layer.output.data:
            raise ValueError("output must not alias color")
        ffi = denoiser_ffi()
        params = ffi.new("OptixDenoiserParams *")
        params.blendFactor = float(blend)
        c_stream = lib.ffi.cast("CUstream", stream_handle(stream))
        image = foreign_pointer(ffi.addressof(layer, "input"), "OptixImage2D *")
        if self.options.model == "hdr":
            self.context._call(lib.optixDenoiserComputeIntensity, self.handle, c_stream, image,
                               self._intensity.ptr, self._scratch.ptr, self._scratch.nbytes)
            params.hdrIntensity = self._intensity.ptr
        elif self.options.model == "aov":
            self.context._call(lib.optixDenoiserComputeAverageColor, self.handle, c_stream,
                               image, self._intensity.ptr, self._scratch.ptr,
                               self._scratch.nbytes)
            params.hdrAverageColor = self._intensity.ptr
        self.context._call(lib.optixDenoiserInvoke, self.handle, c_stream,
                           foreign_pointer(params, "OptixDenoiserParams *"),
                           self._state.ptr, self._state.nbytes,
                           foreign_pointer(guides, "OptixDenoiserGuideLayer *"),
                           foreign_pointer(layer, "OptixDenoiserLayer *"), 1, 0, 0,
                           self._scratch.ptr, self._scratch.nbytes)
        del keep

    def close(self, stream=None) -> None:
        """Destroy the denoiser and free its memory (in `stream` order when given)."""
        self._release_memory(stream)
        super().close()

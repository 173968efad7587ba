"""CPU lane: the host objects' OptiX call sequences, against a stand-in function table
and stand-in device memory. Every host path (context, module, program groups, pipeline
and stack sizes, SBT, acceleration structure build/compact/update, launch, denoiser)
runs, and the test checks what OptiX would receive; real OptiX runs on the GPU lane."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import cupric.optix.api as ox
from cupric.device import optix
from cupric.optix import lib
from cupric.optix.accel import accel_ffi
from cupric.optix.context import DeviceContext
from cupric.optix.denoiser import denoiser_ffi
from cupric.types import Array, f32, u64

ffi = lib.ffi


class FakeBuffer:
    """Device memory stand-in: host bytes at a made-up, 256-byte aligned address."""

    def __init__(self, memory, shape, dtype) -> None:
        self.host = np.zeros(shape, dtype=dtype)
        self.ptr = memory.allocate(self)
        self.shape, self.dtype = self.host.shape, self.host.dtype
        self.strides, self.nbytes = self.host.strides, self.host.nbytes
        self.itemsize = self.dtype.itemsize
        self.closed = False
        self.memory = memory

    def close(self, stream=None) -> None:
        assert not self.closed, "freed twice"
        self.closed = True
        self.memory.live.pop(self.ptr)

    def to_numpy(self, stream=None):
        # DeviceBuffer's name: the library must not call anything a real buffer lacks
        # (accel.compacted_size once called .get(), which only this stand-in had).
        return self.host.copy()

    def copy_from(self, source, stream=None) -> None:
        self.host.view(np.uint8).reshape(-1)[:] = np.asarray(source).view(np.uint8).reshape(-1)


class FakeMemory:
    def __init__(self) -> None:
        self.live: dict = {}
        self.next = 0x10_0000_0000

    def allocate(self, buffer) -> int:
        ptr = self.next
        self.next += (buffer.host.nbytes + 511) // 256 * 256
        self.live[ptr] = buffer
        return ptr

    def empty(self, shape, dtype=np.float64, stream=None):
        return FakeBuffer(self, shape, dtype)

    def to_device(self, array, stream=None):
        array = np.asarray(array)
        buffer = FakeBuffer(self, array.shape, array.dtype)
        buffer.host[...] = array
        return buffer

    def at(self, address: int) -> FakeBuffer:
        return self.live[address]


class FakeDevice:
    ordinal = 0

    class _Primary:
        ptr = 0xC0FFEE

        def make_current(self):
            pass

    def primary_context(self):
        return self._Primary()


class FakeTable:
    """The OptiX functions cupric calls, recording what they receive."""

    def __init__(self, memory: FakeMemory) -> None:
        self.memory = memory
        self.calls: list = []
        self.handles = itertools.count(0x1000, 0x10)
        self.destroyed: list = []
        self.log_callback = None

    def _handle(self, ctype):
        return ffi.cast(ctype, next(self.handles))

    def __getattr__(self, name):
        if name.endswith("Destroy"):
            def destroy(handle):
                self.destroyed.append((name, int(ffi.cast("uintptr_t", handle))))
                return 0
            return destroy
        raise AttributeError(name)

    def optixGetErrorString(self, result):
        return ffi.NULL

    def optixDeviceContextCreate(self, cu_context, options, out):
        self.calls.append(("context", int(ffi.cast("uintptr_t", cu_context)),
                           options.validationMode, options.logCallbackLevel))
        self.log_callback = options.logCallbackFunction
        out[0] = self._handle("OptixDeviceContext")
        return 0

    def optixDeviceContextSetCacheEnabled(self, context, enabled):
        self.calls.append(("cache_enabled", enabled))
        return 0

    def optixDeviceContextSetCacheLocation(self, context, location):
        self.calls.append(("cache_location", location))
        return 0

    def optixDeviceContextGetProperty(self, context, prop, value, size):
        ffi.cast("unsigned int *", value)[0] = {0x2001: 31, 0x2005: 0}.get(prop, 7)
        return 0

    def optixModuleCreate(self, context, mco, pco, data, size, log, log_size, out):
        ptx = bytes(data[:size]).decode()
        self.calls.append(("module", ptx, mco.optLevel,
                           ffi.string(pco.pipelineLaunchParamsVariableName).decode(),
                           pco.numPayloadValues))
        message = b"compiled\0"
        ffi.memmove(log, message, len(message))
        out[0] = self._handle("OptixModule")
        return 0

    def optixProgramGroupCreate(self, context, desc, count, options, log, log_size, out):
        entries = []
        if desc.kind == 0x2421:
            entries.append(ffi.string(desc.raygen.entryFunctionName).decode())
        elif desc.kind == 0x2422:
            if desc.miss.entryFunctionName != ffi.NULL:
                entries.append(ffi.string(desc.miss.entryFunctionName).decode())
        elif desc.kind == 0x2424:
            for field in ("CH", "AH", "IS"):
                name = getattr(desc.hitgroup, f"entryFunctionName{field}")
                if name != ffi.NULL:
                    entries.append(ffi.string(name).decode())
        self.calls.append(("group", desc.kind, count, entries))
        out[0] = self._handle("OptixProgramGroup")
        return 0

    def optixProgramGroupGetStackSize(self, group, sizes, pipeline):
        sizes.cssRG, sizes.cssCH, sizes.cssMS = 96, 48, 16
        return 0

    def optixPipelineCreate(self, context, pco, plo, groups, count, log, log_size, out):
        self.calls.append(("pipeline", count, plo.maxTraceDepth))
        out[0] = self._handle("OptixPipeline")
        return 0

    def optixPipelineSetStackSize(self, pipeline, dc_trav, dc_state, css, depth):
        self.calls.append(("stack", dc_trav, dc_state, css, depth))
        return 0

    def optixSbtRecordPackHeader(self, group, header):
        ffi.memmove(header, bytes([int(ffi.cast("uintptr_t", group)) & 0xFF]) * 32, 32)
        return 0

    def optixAccelComputeMemoryUsage(self, context, options, inputs, count, sizes):
        sizes.outputSizeInBytes, sizes.tempSizeInBytes, sizes.tempUpdateSizeInBytes = \
            4096, 1024, 512
        return 0

    def optixAccelBuild(self, context, stream, options, inputs, count, temp, temp_size,
                        output, output_size, handle, emitted, emit_count):
        build_input = accel_ffi().cast("OptixBuildInput *", int(ffi.cast("uintptr_t", inputs)))
        assert self.memory.at(temp).nbytes >= temp_size
        assert self.memory.at(output).nbytes >= output_size
        self.calls.append(("build", options.operation, options.buildFlags, count,
                           build_input[0].type, temp_size, output_size, emit_count))
        if emit_count:
            desc = accel_ffi().cast("OptixAccelEmitDesc *", int(ffi.cast("uintptr_t", emitted)))
            assert desc.type == 0x2181
            self.memory.at(desc.result).host[0] = 1536
        handle[0] = 0xA000 + output // 0x100
        return 0

    def optixAccelCompact(self, context, stream, handle, output, size, out):
        self.calls.append(("compact", handle, size))
        out[0] = 0xB000
        return 0

    def optixLaunch(self, pipeline, stream, params, size, sbt, width, height, depth):
        record = self.memory.at(params).to_numpy().tobytes() if size else b""
        self.calls.append(("launch", record, size, sbt.raygenRecord, sbt.missRecordCount,
                           sbt.hitgroupRecordStrideInBytes, width, height, depth))
        return 0

    def optixDenoiserCreate(self, context, kind, options, out):
        opts = denoiser_ffi().cast("OptixDenoiserOptions *", int(ffi.cast("uintptr_t", options)))
        self.calls.append(("denoiser", kind, opts.guideAlbedo, opts.guideNormal))
        out[0] = self._handle("OptixDenoiser")
        return 0

    def optixDenoiserComputeMemoryResources(self, denoiser, width, height, sizes):
        s = denoiser_ffi().cast("OptixDenoiserSizes *", int(ffi.cast("uintptr_t", sizes)))
        s.stateSizeInBytes, s.withoutOverlapScratchSizeInBytes = 1000, 2000
        s.computeIntensitySizeInBytes = 64
        return 0

    def optixDenoiserSetup(self, denoiser, stream, width, height, state, state_size, scratch,
                           scratch_size):
        self.calls.append(("setup", width, height, state_size, scratch_size))
        return 0

    def optixDenoiserComputeIntensity(self, denoiser, stream, image, out, scratch, size):
        self.calls.append(("intensity", out))
        return 0

    def optixDenoiserInvoke(self, denoiser, stream, params, state, state_size, guides, layers,
                            count, x, y, scratch, scratch_size):
        p = denoiser_ffi().cast("OptixDenoiserParams *", int(ffi.cast("uintptr_t", params)))
        layer = denoiser_ffi().cast("OptixDenoiserLayer *", int(ffi.cast("uintptr_t", layers)))
        self.calls.append(("invoke", p.hdrIntensity, p.blendFactor, layer.input.width,
                           layer.output.data, count))
        return 0


@pytest.fixture
def fake(monkeypatch):
    import cupric.runtime.context as runtime_context
    import cupric.runtime.memory as runtime_memory
    memory = FakeMemory()
    table = FakeTable(memory)
    lib._declare()
    before = set(vars(lib))
    monkeypatch.setattr(lib._state, "table", table)
    monkeypatch.setattr(runtime_memory, "empty", memory.empty)
    monkeypatch.setattr(runtime_memory, "to_device", memory.to_device)
    monkeypatch.setattr(runtime_context, "synchronize", lambda: None)
    import cupric.compiler.target as target
    monkeypatch.setattr(target, "driver_max_ptx_isa", lambda: (9, 0))
    yield table, memory
    # Objects a failing test left open release through the fake table, not the driver.
    import gc
    from cupric.runtime._lifetime import Resource, drain
    gc.collect()
    drain()
    for obj in gc.get_objects():
        if isinstance(obj, Resource) and type(obj).__module__.startswith("cupric.optix") \
                and not obj.closed:
            obj.close()
    # lib caches resolved table entries in its globals: forget the fake ones.
    for name in set(vars(lib)) - before:
        delattr(lib, name)


IMAGE = Array[f32, 2, "C"]


@ox.raygen
def rg(image: IMAGE, handle: u64):
    x, y, _ = optix.launch_index()
    image[y, x] = f32(optix.trace(handle, (0.0, 0.0, 0.0), (0.0, 0.0, 1.0), 0.0, 1.0, 0))


@ox.miss
def ms(image: IMAGE, handle: u64):
    optix.set_payload(0, 1)


@ox.closest_hit
def ch(image: IMAGE, handle: u64):
    optix.set_payload(0, 2)


def _context(table, **options):
    context = DeviceContext._create(FakeDevice(), ox.ContextOptions(**options))
    return context


def test_context_module_groups_pipeline_sbt_launch(fake):
    table, memory = fake
    context = _context(table, validation=True, cache_enabled=False,
                       cache_location="/tmp/optix-cache")
    assert table.calls[0] == ("context", 0xC0FFEE, 0xFFFFFFFF, 3)
    assert ("cache_enabled", 0) in table.calls and ("cache_location", b"/tmp/optix-cache") \
        in table.calls
    assert context.get_property("max_trace_depth") == 31
    # OPTIX_DEVICE_PROPERTY_RTCORE_VERSION, 0 as on an H100/H200 (no RT cores).
    assert context.rtcore_version == 0 and context.get_property("max_instance_id") == 7
    # OptiX's log reaches ctx.log through the callback.
    table.log_callback(3, b"TAG", b"hello", ffi.NULL)
    assert context.log[-1] == (3, "TAG", "hello")

    pco = ox.PipelineCompileOptions(num_payload_values=1)
    module = context.compile_module([rg, ms, ch], ox.ModuleCompileOptions(opt_level=3), pco)
    kind, ptx, opt, params_name, payloads = table.calls[-1]
    assert kind == "module" and ".version 9.0" in ptx and "__raygen__rg" in ptx
    assert (opt, params_name, payloads) == (0x2343, "cupric_launch_params", 1)
    assert module.compile_log == "compiled"

    groups = [context.raygen_group(module, rg), context.miss_group(module, ms),
              context.hit_group(module, closest_hit=ch)]
    assert [c[3] for c in table.calls if c[0] == "group"] == [
        ["__raygen__rg"], ["__miss__ms"], ["__closesthit__ch"]]
    with pytest.raises(ValueError, match="no program"):
        context.raygen_group(module, "missing")

    pipeline = context.create_pipeline(groups, pco, ox.PipelineLinkOptions(max_trace_depth=2))
    assert ("pipeline", 3, 2) in table.calls
    # cssRG 96, max(ch, ms) 48 twice for depth 2 (the deepest level also vs is+ah = 0).
    assert table.calls[-1] == ("stack", 0, 0, 96 + 48 + 48, 2)
    assert pipeline.param_types == module.compiled.param_types

    records = [ox.make_records(g) for g in groups]
    sbt = ox.create_sbt(raygen=records[0], miss=records[1],
                        hitgroup=ox.make_records(groups[2], [(1.0,)], dtype=[("k", "f4")]))
    low_byte = int(ffi.cast("uintptr_t", groups[0].handle)) & 0xFF
    assert sbt.records["raygen"]["header"].tobytes() == bytes([low_byte]) * 32
    assert sbt.buffers["raygen"].host.tobytes() == bytes([low_byte]) * 32
    image = memory.empty((4, 8), np.float32)
    pipeline.launch(sbt, (8, 4), image, 0xABC)
    kind, record, size, raygen, miss_count, hit_stride, w, h, d = table.calls[-1]
    assert (kind, size, w, h, d, miss_count, hit_stride) == ("launch", 48, 8, 4, 1, 1, 48)
    assert np.frombuffer(record, "<u8").tolist() == [image.ptr, 4, 8, 8, 1, 0xABC]
    assert raygen == sbt.buffers["raygen"].ptr
    launches_before = len(memory.live)
    with pytest.raises(TypeError, match="2 launch parameters"):
        pipeline.launch(sbt, (8, 4), image)
    assert len(memory.live) == launches_before  # nothing leaked by a refused launch

    sbt.close()
    pipeline.close()
    for g in groups:
        g.close()
    module.close()
    context.close()
    assert [name for name, _ in table.destroyed] == [
        "optixPipelineDestroy", "optixProgramGroupDestroy", "optixProgramGroupDestroy",
        "optixProgramGroupDestroy", "optixModuleDestroy", "optixDeviceContextDestroy"]
    with pytest.raises(Exception, match="closed"):
        context.handle


def test_accel_build_compact_update(fake):
    table, memory = fake
    context = _context(table)
    vertices = memory.to_device(np.zeros((3, 3), np.float32))
    options = ox.AccelBuildOptions(allow_compaction=True, allow_update=True)
    gas = context.build_accel([ox.TriangleInput(vertices)], options)
    kind, operation, flags, count, input_type, temp, out, emits = table.calls[-1]
    assert (kind, operation, flags, count, input_type) == ("build", 0x2161, 1 | 2 | 4, 1,
                                                           0x2141)
    assert (temp, out, emits) == (1024, 4096, 1)
    assert gas.kind == "gas" and gas.handle >= 0xA000
    assert gas.compacted_size() == 1536
    compact = gas.compact()
    assert compact is not gas and compact.nbytes == 1536 and compact.handle == 0xB000
    gas.update()
    assert table.calls[-1][:3] == ("build", 0x2162, 1 | 2 | 4) and table.calls[-1][5] == 512
    with pytest.raises(ValueError, match="primitive count"):
        gas.update([ox.TriangleInput(memory.to_device(np.zeros((6, 3), np.float32)))])
    instances = memory.to_device(ox.make_instances([gas, compact]))
    ias = context.build_accel(ox.InstanceInput(instances))
    assert ias.kind == "ias" and table.calls[-1][4] == 0x2143
    temporaries = {p for p, b in memory.live.items() if b.nbytes in (1024, 512)}
    assert not temporaries  # temp buffers freed after each build
    for accel in (ias, compact, gas):
        accel.close()
    with pytest.raises(Exception, match="closed"):
        gas.handle
    context.close()


def test_denoiser_calls(fake):
    table, memory = fake
    context = _context(table)
    denoiser = context.create_denoiser(ox.DenoiserOptions(model="hdr", guide_albedo=True))
    assert table.calls[-1] == ("denoiser", 0x2323, 1, 0)
    with pytest.raises(ValueError, match="setup"):
        denoiser.invoke(memory.empty((4, 4, 3), np.float32),
                        memory.empty((4, 4, 3), np.float32))
    denoiser.setup(8, 4)
    assert table.calls[-1] == ("setup", 8, 4, 1000, 2000)
    color = memory.empty((4, 8, 3), np.float32)
    output = memory.empty((4, 8, 3), np.float32)
    albedo = memory.empty((4, 8, 3), np.float32)
    denoiser.invoke(color, output, albedo=albedo, blend=0.25)
    intensity = table.calls[-2]
    assert intensity[0] == "intensity"
    assert table.calls[-1] == ("invoke", intensity[1], 0.25, 8, output.ptr, 1)
    with pytest.raises(ValueError, match="alias"):
        denoiser.invoke(color, color, albedo=albedo)
    with pytest.raises(ValueError, match="exceeds"):
        big = memory.empty((8, 8, 3), np.float32)
        denoiser.invoke(big, memory.empty((8, 8, 3), np.float32),
                        albedo=memory.empty((8, 8, 3), np.float32))
    live = len(memory.live)
    denoiser.close()
    assert len(memory.live) == live - 3  # state, scratch, intensity
    context.close()


def _destroyed_names(table):
    return [name for name, _ in table.destroyed]


def test_closing_the_context_closes_its_objects_first(fake):
    """What crashed the first GPU run: a pipeline released (by its finalizer, from
    another thread's drain) after its context was destroyed. Closing the context now
    closes what is still open, newest first, and a later release does nothing."""
    import gc

    from cupric.runtime._lifetime import drain
    from cupric.runtime.errors import ClosedError
    table, memory = fake
    context = _context(table)
    pco = ox.PipelineCompileOptions(num_payload_values=1)
    module = context.compile_module([rg, ms, ch], pipeline_options=pco)
    groups = [context.raygen_group(module, rg), context.miss_group(module, ms)]
    pipeline = context.create_pipeline(groups, pco)
    denoiser = context.create_denoiser()
    context.close()
    assert _destroyed_names(table) == [
        "optixDenoiserDestroy", "optixPipelineDestroy", "optixProgramGroupDestroy",
        "optixProgramGroupDestroy", "optixModuleDestroy", "optixDeviceContextDestroy"]
    assert all(obj.closed for obj in (module, *groups, pipeline, denoiser))
    with pytest.raises(ClosedError):
        pipeline.set_stack_sizes()
    del module, groups, pipeline, denoiser
    gc.collect()
    drain()
    assert len(table.destroyed) == 6  # nothing released twice, nothing after the context
    context.close()  # a second close does nothing
    assert len(table.destroyed) == 6


def test_objects_dropped_before_the_context_are_released_before_it(fake):
    import gc
    table, memory = fake
    context = _context(table)
    pco = ox.PipelineCompileOptions(num_payload_values=1)
    module = context.compile_module([rg, ms], pipeline_options=pco)
    group = context.raygen_group(module, rg)
    handle = int(ffi.cast("uintptr_t", group.handle))
    del module  # the group keeps it alive
    gc.collect()
    assert table.destroyed == []
    del group
    gc.collect()  # queued, not run: finalizers never call OptiX from a GC pass
    assert table.destroyed == []
    context.close()  # runs the queued releases first
    assert table.destroyed[0] == ("optixProgramGroupDestroy", handle)
    assert _destroyed_names(table) == ["optixProgramGroupDestroy", "optixModuleDestroy",
                                       "optixDeviceContextDestroy"]


def test_a_release_after_the_context_is_destroyed_does_nothing(fake):
    from cupric.optix.pipeline import _destroy_pipeline
    table, memory = fake
    context = _context(table)
    context.close()
    _destroy_pipeline(ffi.cast("OptixPipeline", 0x1234), context, ())
    assert _destroyed_names(table) == ["optixDeviceContextDestroy"]


def test_a_failed_creation_registers_no_release(fake, monkeypatch):
    import gc

    from cupric.runtime._lifetime import drain, pending_count
    table, memory = fake
    context = _context(table)
    monkeypatch.setattr(table, "optixPipelineCreate",
                        lambda *args: 7001, raising=False)  # OPTIX_ERROR_INVALID_VALUE
    pco = ox.PipelineCompileOptions(num_payload_values=1)
    module = context.compile_module([rg, ms], pipeline_options=pco)
    group = context.raygen_group(module, rg)
    with pytest.raises(ox.OptixCompileError):
        context.create_pipeline([group], pco)
    gc.collect()
    assert pending_count() == 0
    drain()
    assert table.destroyed == []


def test_a_log_callback_error_at_creation_closes_the_new_object(fake, monkeypatch):
    table, memory = fake

    def refuse(level, tag, message):
        raise KeyError("from the user's callback")

    context = _context(table, log_callback=refuse)
    create = table.optixModuleCreate

    def logging_create(*args):
        table.log_callback(4, b"COMPILER", b"compiling", ffi.NULL)
        return create(*args)

    monkeypatch.setattr(table, "optixModuleCreate", logging_create)
    with pytest.raises(RuntimeError, match="log callback") as info:
        context.compile_module([rg, ms], pipeline_options=ox.PipelineCompileOptions())
    assert isinstance(info.value.__cause__, KeyError)
    # The module was made and owned, then destroyed: nothing leaks.
    assert _destroyed_names(table) == ["optixModuleDestroy"]
    context.close()


def test_denoiser_without_weights_raises_a_typed_error(fake, monkeypatch):
    """The GPU machine's driver install lacked the weights file: OptiX logged why and
    returned OPTIX_ERROR_INTERNAL_ERROR. cupric raises DenoiserUnavailableError naming
    the file, and registers no release for the handle that was never made."""
    from cupric.runtime._lifetime import pending_count
    table, memory = fake
    context = _context(table)
    path = b"/usr/share/nvidia/nvoptix.bin"
    results = [7990, 7001]  # then OPTIX_ERROR_INVALID_VALUE, without a log message

    def create(context_handle, kind, options, out):
        result = results.pop(0)
        if result == 7990:
            table.log_callback(2, b"DENOISER", b"Unable to load denoiser weights: Could "
                               b"not open optix denoiser weights file " + path, ffi.NULL)
        return result

    # Patched before first use: lib keeps the table entries it resolved.
    monkeypatch.setattr(table, "optixDenoiserCreate", create)
    with pytest.raises(ox.DenoiserUnavailableError) as info:
        context.create_denoiser(ox.DenoiserOptions(model="ldr"))
    error = info.value
    assert isinstance(error, ox.OptixError)
    assert error.name == "OPTIX_ERROR_INTERNAL_ERROR" and error.code == 7990
    assert error.weights_file == path.decode()
    assert "no denoiser weights file (/usr/share/nvidia/nvoptix.bin)" in str(error)
    assert pending_count() == 0
    # Other failures stay plain OptixErrors.
    with pytest.raises(ox.OptixError) as info:
        context.create_denoiser()
    assert not isinstance(info.value, ox.DenoiserUnavailableError)
    context.close()
    assert _destroyed_names(table) == ["optixDeviceContextDestroy"]


def test_missing_weights_without_a_log_message():
    from cupric.optix.denoiser import DEFAULT_WEIGHTS_FILE, missing_weights_error
    error = missing_weights_error(7990, "OPTIX_ERROR_INTERNAL_ERROR", [],
                                  weights_exist=lambda path: False)
    if error is not None:  # Linux: the default location tells
        assert error.weights_file == DEFAULT_WEIGHTS_FILE
        assert DEFAULT_WEIGHTS_FILE in str(error)
    assert missing_weights_error(7990, "OPTIX_ERROR_INTERNAL_ERROR", [],
                                 weights_exist=lambda path: True) is None
    assert missing_weights_error(7001, "OPTIX_ERROR_INVALID_VALUE", [],
                                 weights_exist=lambda path: False) is None

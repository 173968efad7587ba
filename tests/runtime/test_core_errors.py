"""CPU lane: the CUresult -> exception table, sticky errors, messages, pickling."""

from __future__ import annotations

import pickle

import pytest

from cupric.runtime import errors as E
from cupric.runtime._driver import check


@pytest.fixture(autouse=True)
def _clean_poison():
    E.reset_context_poison()
    yield
    E.reset_context_poison()


@pytest.mark.parametrize("code, cls", [
    (1, E.InvalidValueError), (2, E.CudaOutOfMemoryError), (100, E.NoDeviceError),
    (201, E.InvalidContextError), (218, E.ModuleLoadError), (400, E.InvalidHandleError),
    (500, E.NotFoundError), (600, E.NotReadyError), (701, E.LaunchError),
    (720, E.LaunchError), (912, E.LaunchError), (801, E.NotSupportedError),
    (901, E.StreamCaptureError), (999, E.CudaError),
])
def test_table_maps_codes_to_classes(code, cls):
    exc = E.error_from_code(code)
    assert type(exc) is cls
    assert isinstance(exc, E.CudaError) and isinstance(exc, RuntimeError)
    assert exc.code == code
    assert exc.name.startswith("CUDA_ERROR_") or exc.name.startswith("CUresult(")
    assert exc.description
    assert exc.name in str(exc)


def test_invalid_value_is_also_value_error():
    assert isinstance(E.error_from_code(1), ValueError)


def test_out_of_memory_says_how_much():
    exc = E.CudaOutOfMemoryError(2, requested=3 << 30, free=1 << 30, total=80 << 30)
    text = str(exc)
    assert "3.00 GiB" in text and "1.00 GiB of 80.00 GiB free" in text
    assert exc.requested == 3 << 30 and exc.free == 1 << 30
    assert isinstance(exc, MemoryError)


def test_check_passes_requested_bytes_into_oom():
    with pytest.raises(E.CudaOutOfMemoryError, match="tried to allocate 1.50 KiB"):
        check((2, None), requested=1536)


def test_sticky_error_then_context_lost():
    first = E.error_from_code(700)
    assert type(first) is E.IllegalAddressError
    assert isinstance(first, E.KernelFaultError)
    second = E.error_from_code(700)
    assert type(second) is E.ContextLostError
    assert second.original is first
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in str(second) and "lost" in str(second)
    # Any later sticky code reports the first one, not itself.
    third = E.error_from_code(719)
    assert isinstance(third, E.ContextLostError) and third.original is first


def test_reset_forgets_the_poison():
    E.error_from_code(716)
    E.reset_context_poison()
    assert type(E.error_from_code(716)) is E.KernelFaultError


def test_non_sticky_codes_do_not_poison():
    E.error_from_code(1)
    assert type(E.error_from_code(700)) is E.IllegalAddressError


def test_module_load_error_has_log_and_ptx_version_hint():
    exc = E.ModuleLoadError(222, "cannot load", log="ptxas fatal: too new")
    text = str(exc)
    assert "ptxas fatal: too new" in text and "hint" in text


def test_stub_library_is_no_driver():
    assert isinstance(E.error_from_code(34), E.NoDriverError)


@pytest.mark.parametrize("exc", [
    E.error_from_code(1, "while doing x"),
    E.CudaOutOfMemoryError(2, requested=10),
    E.NoDriverError("none here"),
    E.ModuleLoadError(218, "bad", log="line 3"),
])
def test_errors_pickle(exc):
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc)
    assert str(back) == str(exc)
    assert back.code == exc.code


def test_check_unpacks_results():
    assert check((0,)) is None
    assert check((0, 5)) == 5
    assert check((0, 5, 6)) == (5, 6)
    with pytest.raises(E.NotReadyError):
        check((600,))


def test_not_found_str_is_not_quoted():
    exc = E.NotFoundError(500, "no kernel named 'k'")
    assert str(exc).startswith("no kernel named")


def test_device_assert_maps_to_its_own_sticky_class():
    from cupric.runtime import errors

    assert issubclass(errors.DeviceAssertionError, errors.KernelFaultError)
    assert errors._CLASS_BY_CODE[710] is errors.DeviceAssertionError
    assert 710 in errors.STICKY_CODES

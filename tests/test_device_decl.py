import pytest

import cupric.device as d


def test_intrinsics_refuse_to_run_outside_a_kernel():
    with pytest.raises(d.OutsideKernelError, match="only inside a kernel"):
        d.syncthreads()
    with pytest.raises(d.OutsideKernelError):
        d.threadIdx.x

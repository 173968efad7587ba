"""device_errors.install asks the driver for the error record only when the loaded image
names it: a failing cuModuleGetGlobal is an API error compute-sanitizer's memcheck
reports for every module without a record."""

from __future__ import annotations

import pytest

from cupric.compiler import device_errors
from cupric.runtime.errors import NotFoundError


class _Module:
    def __init__(self, has_record: bool) -> None:
        self.has_record = has_record
        self.asked = 0

    def get_global(self, name):
        self.asked += 1
        if not self.has_record:
            raise NotFoundError(500, f"no global named {name!r}")
        return 0, 8


@pytest.mark.parametrize("image", [".visible .entry k()\n{ ret; }\n",
                                   b"\x7fELF....k....nv.info.k"])
def test_no_probe_when_the_image_has_no_record(image):
    module = _Module(has_record=False)
    assert device_errors.install(module, image) is False
    assert module.asked == 0


def test_image_naming_the_record_is_probed(monkeypatch):
    module = _Module(has_record=True)
    written = []
    module.write_global = lambda name, value: written.append((name, int(value)))
    monkeypatch.setattr(device_errors, "_record", lambda m: type("B", (), {"ptr": 4096})())
    image = f".global .align 8 .u64 {device_errors.RECORD_GLOBAL};\n"
    assert device_errors.install(module, image) is True
    assert module.asked == 1 and written == [(device_errors.RECORD_GLOBAL, 4096)]
    # Without an image the driver is asked, as before.
    bare = _Module(has_record=False)
    assert device_errors.install(bare) is False and bare.asked == 1

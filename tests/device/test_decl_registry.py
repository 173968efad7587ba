"""The declarations of cupric.device: every intrinsic is named after its path, documented,
implemented by the simulator, and listed in docs/device-library.md."""

import pathlib
import re

import pytest

import cupric.device as d
from cupric.device._intrinsic import REGISTRY, Dim3, Intrinsic, Namespace
from cupric.simulator._state import IMPLS

import cupric.simulator  # noqa: F401  (fills IMPLS)

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "device-library.md"


def resolve(name: str):
    """The object at `name` under cupric.device, reading Dim3 components without calling."""
    obj = d
    parts = name.split(".")
    for i, part in enumerate(parts):
        if isinstance(obj, Dim3):
            return obj.component(part)
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_intrinsic_is_named_after_its_path(name):
    assert resolve(name) is REGISTRY[name]


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_intrinsic_is_documented_and_simulated(name):
    doc = REGISTRY[name].doc
    assert len(doc) > 20, f"{name} needs a doc of its signature and semantics"
    assert name in IMPLS, f"the simulator does not implement {name}"


def test_names_are_systematic():
    cuda_names = {"threadIdx", "blockIdx", "blockDim", "gridDim"}
    for name in REGISTRY:
        head, _, rest = name.partition(".")
        if head in cuda_names:
            assert rest in ("x", "y", "z")
        else:
            assert re.fullmatch(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)?", name), name


def test_every_exported_intrinsic_is_registered():
    def walk(obj, seen):
        if isinstance(obj, Intrinsic):
            assert REGISTRY.get(obj.name) is obj
            seen.add(obj.name)
        elif isinstance(obj, Dim3):
            for axis in "xyz":
                walk(obj.component(axis), seen)
        elif isinstance(obj, Namespace) or obj is d.math:
            for value in vars(obj).values():
                walk(value, seen)
    seen: set = set()
    for name in d.__all__:
        walk(getattr(d, name), seen)
    assert seen == set(REGISTRY)


def test_the_simulator_implements_nothing_undeclared():
    assert set(IMPLS) <= set(REGISTRY)


def test_device_library_doc_lists_every_intrinsic():
    text = DOC.read_text()
    missing = [name for name in REGISTRY if f"`{name}" not in text]
    assert not missing, f"docs/device-library.md does not list {missing}"


def test_convergent_kinds_name_declared_intrinsics():
    from cupric.device.kinds import CONVERGENT
    from cupric.simulator._scan import PAUSING

    assert CONVERGENT <= set(REGISTRY) and PAUSING <= set(REGISTRY)
    assert {n for n in REGISTRY if n.startswith("atomic.")} <= PAUSING

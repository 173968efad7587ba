"""The names other modules use after the issue-16 splits: the typer's old import paths,
the simulator's hooks and the runtime's current-device query resolve to the objects that
do the work (no copies, no wrapper on the launch path)."""

from __future__ import annotations

import ast

import pytest

import cupric.compiler.kernel as kmod
from cupric.compiler.typing import (access, calls, common, infer, operators, statements,
                                    values)
from cupric.runtime import allocation, native


def test_the_typer_keeps_its_import_paths():
    from cupric.compiler.typing.infer import (ALLOWED_EXPRESSIONS, ALLOWED_STATEMENTS,
                                              UNKNOWN, TypedFunction, Typer)
    assert UNKNOWN is common.UNKNOWN
    assert ALLOWED_STATEMENTS is common.ALLOWED_STATEMENTS
    assert ALLOWED_EXPRESSIONS is common.ALLOWED_EXPRESSIONS
    assert TypedFunction is infer.TypedFunction
    parts = (statements.StatementTyping, values.ValueTyping, access.AccessTyping,
             operators.OperatorTyping, calls.CallTyping)
    assert all(issubclass(Typer, part) for part in parts)
    # every expression kind of the kernel language still has its typing method
    for kind in (ast.Constant, ast.Name, ast.Attribute, ast.Subscript, ast.Tuple,
                 ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Call):
        assert callable(getattr(Typer, "_e_" + kind.__name__))


def test_simulator_hooks_are_the_simulators_own_functions(monkeypatch):
    import cupric.simulator._impl_hopper as hopper
    import cupric.simulator._launch as launch
    import cupric.simulator._scan as scan
    import cupric.simulator._twin as twin
    from cupric.simulator import hooks
    from cupric.simulator.hooks import needs, run, twin_of, use_cluster_shape
    assert (run, twin_of, needs) == (launch.run, twin.twin_of, scan.needs)
    assert use_cluster_shape is hopper.use_cluster_shape
    assert sorted(hooks.__all__) == sorted(set(dir(hooks)) & set(hooks.__all__))

    def replaced(*args, **kwargs):
        return None

    monkeypatch.setattr(launch, "run", replaced)
    from cupric.simulator.hooks import run as now
    assert now is replaced  # read at each import: a replaced function is what callers get
    with pytest.raises(AttributeError, match="no attribute 'walk'"):
        hooks.walk


def test_the_current_device_query_is_bound_without_a_wrapper():
    assert native.current_device_ordinal is allocation.current_device_ordinal
    assert allocation._device_of_context is allocation.current_device_ordinal
    assert kmod._current_device is native.current_device_ordinal
    assert kmod.driver_available is native.driver_available

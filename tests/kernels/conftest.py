"""Fixtures of the cupric.kernels tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def sim(monkeypatch):
    """Run the kernels on the CPU simulator, even on a machine with a GPU."""
    monkeypatch.setenv("CUPRIC_SIMULATOR", "1")

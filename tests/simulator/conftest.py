"""Simulator tests: a short watchdog, so that a regression that hangs fails quickly, and
an `engine` fixture that runs a module's tests under both engines of the threaded modes
(generators, and one OS thread per simulated thread)."""

import pytest


@pytest.fixture(autouse=True)
def _short_watchdog(monkeypatch):
    monkeypatch.setenv("CUPRIC_SIMULATOR_TIMEOUT", "20")


@pytest.fixture(params=["generators", "threads"])
def engine(request, monkeypatch):
    monkeypatch.setenv("CUPRIC_SIMULATOR_ENGINE", request.param)
    return request.param

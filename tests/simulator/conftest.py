"""Simulator tests: a short watchdog, so that a regression that hangs fails quickly."""

import pytest


@pytest.fixture(autouse=True)
def _short_watchdog(monkeypatch):
    monkeypatch.setenv("CUPRIC_SIMULATOR_TIMEOUT", "20")

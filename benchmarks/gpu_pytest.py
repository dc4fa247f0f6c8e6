"""pytest plugin of ``benchmarks/gpu.sh`` (``-p gpu_pytest``): each test's JAX backend as a property in the JUnit
report, and the default backend printed at the end, so that the log shows where the tests ran."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _jax_backend(record_property):
    import jax

    record_property("jax_backend", jax.default_backend())


def pytest_terminal_summary(terminalreporter):
    import jax

    terminalreporter.write_line(f"jax default backend of the tests: {jax.default_backend()} {jax.devices()}")

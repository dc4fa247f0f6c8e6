"""Shared fixtures: small random networks and data, two CPU devices for chains."""

import bayes_attn as ba  # first: sets OPENBLAS_NUM_THREADS before NumPy loads

import numpyro  # noqa: E402

numpyro.set_host_device_count(2)

import numpy as np  # noqa: E402
import pytest  # noqa: E402


def random_network(heads, *, N0=6, width=4, variances=1.0, readout="last", seed=0, scale=1.0):
    """A network with random bilinear attention, ``heads`` per layer."""
    rng = np.random.default_rng(seed)
    att = [scale * rng.normal(size=(h, N0, N0)) for h in heads]
    return ba.Network(att, width, variances, readout)


def random_data(P, *, T=4, N0=6, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(P, T, N0))
    y = np.where(rng.random(P) < 0.5, -1.0, 1.0)
    return x, y


@pytest.fixture
def tiny():
    """Tiny problem: N=4, 2×2 heads (4 paths), P=20, 7 test inputs."""
    net = random_network((2, 2), width=4)
    x, y = random_data(20)
    xt, _ = random_data(7, seed=2)
    return net, x, y, xt

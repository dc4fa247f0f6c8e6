"""The ``bayes-attn`` command (also ``python -m bayes_attn``): :func:`bayes_attn.cli.main` in a process of its own.

A command is short-lived and builds hundreds of thousands of objects while it
imports JAX and xarray and traces its programs, so the cycle collector runs
less often (:data:`GC_THRESHOLD`, set before those imports), and the process
exits without the interpreter's last collections over all of them
(``gc.freeze``). Files are closed by then and nothing waits for a
collection. :func:`bayes_attn.cli.main`, which tests call in-process, leaves
the collector alone.
"""

from __future__ import annotations

import gc
import sys

GC_THRESHOLD = (50_000, 20, 20)
"""``gc.set_threshold`` of the command: allocations before a young collection, and the two older generations'."""


def console() -> None:
    gc.set_threshold(*GC_THRESHOLD)
    from .cli import main

    rc = main()
    gc.freeze()
    sys.exit(rc)


if __name__ == "__main__":
    console()

"""Ctrl-C for the command: one line and exit status 130 at once, whatever the process is doing.

Python runs a signal's handler in the main thread between two bytecodes. While
a compiled JAX program runs (NUTS's whole sampling loop is one) the main
thread waits in XLA, so the default handler's ``KeyboardInterrupt`` comes only
when the program returns, or is raised inside a host callback (NumPyro's
progress bar), which XLA turns into a runtime error and a traceback; and an
interpreter that exits while XLA's threads still run can crash. So, for the
command's run, SIGINT's Python handler does nothing and its C handler wakes a
watcher thread (``signal.set_wakeup_fd``), which writes the message and ends
the process with ``os._exit``: no exception in any frame, no interpreter
teardown. The output folder's design makes this safe (:mod:`bayes_attn._internal.outputs`:
files move in only when the set is complete, the manifest names every file
while they move, and the next run removes the staging folder and temporaries
a killed run left; the folder's lock goes with the process).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

__all__ = ["exit_on_interrupt"]


def _watch(fd: int, message: bytes, status: int) -> None:
    """Read the signals the C handler writes to ``fd``; at SIGINT, write ``message`` to stderr and exit."""
    while True:
        try:
            data = os.read(fd, 64)
        except OSError:
            return
        if not data:
            return
        if signal.SIGINT in data:
            with contextlib.suppress(Exception):
                sys.stdout.flush()  # what the command printed before stays printed
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            with contextlib.suppress(OSError):
                os.write(2, message)
            os._exit(status)


@contextlib.contextmanager
def exit_on_interrupt(message: str, status: int) -> Iterator[None]:
    """Within the block, SIGINT (Ctrl-C) writes ``message`` (one line) to stderr and exits with ``status`` at once.

    Does nothing outside the main thread or where SIGINT is ignored (a process started with it ignored keeps
    ignoring it); the previous handling is restored after the block."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) in (
            signal.SIG_IGN, None):
        yield
        return
    read, write = os.pipe()
    os.set_blocking(write, False)
    old_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    old_handler = signal.signal(signal.SIGINT, lambda signum, frame: None)
    watcher = threading.Thread(target=_watch, args=(read, f"{message}\n".encode(), status), daemon=True,
                               name="bayes-attn-interrupt")
    watcher.start()
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old_handler)
        signal.set_wakeup_fd(old_fd)
        os.close(write)  # the watcher reads the end of the pipe and returns
        watcher.join()
        os.close(read)

"""A file that never ends: a FIFO whose writer sends some text and then keeps the pipe open, for the tests that a
reader refuses a bad row or an endless line as soon as it reads it, not once the file is whole."""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Callable

import pytest

from autoscaler.replay.trace import ReplayError


def refused_while_open(fifo: Path, text: str, read: Callable[[str], Any]) -> str | None:
    """Make ``fifo``, write ``text`` to it and keep it open; ``read(path)`` in a thread must raise ReplayError. The
    error's message if it came while the writer still held the pipe (within 10 s), else None."""
    os.mkfifo(fifo)
    release = threading.Event()

    def writer() -> None:
        with open(fifo, "w") as fh:
            fh.write(text)
            fh.flush()
            release.wait(30)

    threading.Thread(target=writer, daemon=True).start()
    found: list[BaseException] = []
    reader = threading.Thread(target=lambda: found.append(pytest.raises(ReplayError, read, str(fifo)).value),
                              daemon=True)
    reader.start()
    reader.join(10)
    said = str(found[0]) if found else None  # before the writer lets go of the pipe
    release.set()
    reader.join(10)
    return said

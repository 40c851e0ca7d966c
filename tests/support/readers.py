"""The readers of zip-based files as calls of a path, for tests parametrised over entry points:
each opens the file, reads what its reader reads on opening, and closes it."""

from __future__ import annotations

from pathlib import Path

from cudnn_rnn.io import files, npz
from cudnn_rnn.io.torch import torchscript


def open_archive(path: Path) -> None:
    with torchscript.open_archive(path):
        pass


def open_npz(path: Path) -> None:
    with npz.open_npz(path):
        pass


def open_zip(path: Path) -> None:
    with files.open_zip(path):
        pass

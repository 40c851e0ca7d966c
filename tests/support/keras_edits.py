"""Copies of Keras ``.h5`` fixtures with their ``model_config`` edited: the settings a test
needs, in a file real Keras wrote."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any


def edited_config(src: Path, dst_dir: Path, edit: Callable[[list[Any]], Any]) -> Path:
    """A copy of the ``.h5`` file ``src`` in ``dst_dir`` whose model_config's layer list was
    passed through ``edit`` (which changes it in place)."""
    import h5py

    path = dst_dir / src.name
    shutil.copy(src, path)
    with h5py.File(path, "r+") as f:
        config = json.loads(f.attrs["model_config"])
        edit(config["config"]["layers"])
        f.attrs["model_config"] = json.dumps(config)
    return path

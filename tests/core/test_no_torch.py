"""core/ is pure: it imports and works with torch absent."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked in this test")
        return None

sys.meta_path.insert(0, NoTorch())
import numpy as np
import cudnn_rnn.core as core
from cudnn_rnn.core.reference import rnn_forward

spec = core.RNNSpec("gru", 2, 3, 2, direction="bidirectional")
layout = core.layout_of(spec)
w, b = layout.unpack(np.arange(layout.size, dtype=float))
assert (layout.pack(w, b) == np.arange(layout.size)).all()
y, h, c = rnn_forward("gru", np.zeros((2, 1, 2)), np.zeros((4, 1, 3)), None, w, b,
                      num_layers=2, bidirectional=True)
assert y.shape == (2, 1, 6) and c is None
assert not any(m == "torch" or m.startswith("torch.") for m in sys.modules)
print("ok")
"""


def test_core_imports_without_torch() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"

"""NumPy arrays of canonical weights -> our layer: :func:`from_numpy_canonical`, on
:func:`cudnn_rnn.io.npz.read_canonical` (which checks and reads them) and the one builder."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from cudnn_rnn.converters.canonical import layer_from_canonical
from cudnn_rnn.core.constants import CUDNN_INPUT_LINEAR_MODE, CUDNN_RNN_UNIDIRECTION
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.io.npz import FLOAT_DTYPES, read_canonical
from cudnn_rnn.layers import _CudnnRNN

__all__ = ["from_numpy_canonical"]


def from_numpy_canonical(
    source: str | os.PathLike[str] | Sequence[Any],
    mode: str,
    num_layers: int,
    num_units: int,
    input_size: int,
    *,
    direction: str = CUDNN_RNN_UNIDIRECTION,
    input_mode: str = CUDNN_INPUT_LINEAR_MODE,
    num_proj: int | None = None,
    dtype: torch.dtype | None = None,
) -> _CudnnRNN:
    """Our layer (on the CPU) holding canonical weights given as NumPy arrays.

    ``source`` is the path of an ``.npz`` archive that ``np.savez(path, *weights, *biases)``
    wrote (members ``arr_0 .. arr_{N-1}``), or the arrays themselves (NumPy arrays or tensors),
    ``[*weights, *biases]``, in the canonical order of ``params_to_canonical`` (docs/api.md):
    per layer and direction the ``G`` input matrices ``[H, in]``, the ``G`` recurrent matrices
    ``[H, P or H]`` and the projection ``[P, H]``, then every bias ``[H]`` (``G`` input biases,
    ``G`` recurrent biases a layer-direction). The configuration is the layer constructor's;
    every array's count and shape is checked against it, all problems in one error (for a file,
    before any array is read). ``dtype`` defaults to the arrays' (float16, float32 or float64).
    Under ``skip_input`` layer 0's input matrices must be identity matrices, as
    ``params_to_canonical`` returns them.

    >>> import os, tempfile, numpy as np, torch
    >>> from cudnn_rnn import CudnnGRU, ops
    >>> gru = CudnnGRU(1, 4, input_size=3, dtype=torch.float64)
    >>> op = ops.CudnnGRU(1, 4, 3, dtype=torch.float64)
    >>> weights, biases = op.params_to_canonical(gru.opaque_kernel.detach())
    >>> path = os.path.join(tempfile.mkdtemp(), "gru.npz")
    >>> np.savez(path, *[t.numpy() for t in weights + biases])
    >>> back = from_numpy_canonical(path, "gru", 1, 4, 3)
    >>> torch.equal(back.opaque_kernel, gru.opaque_kernel)
    True
    """
    owner = "from_numpy_canonical"
    spec = RNNSpec(
        mode, num_layers, num_units, input_size, input_mode, direction, num_proj, owner=owner
    )
    weights, biases = read_canonical(source, spec, owner)
    if dtype is None:
        dtype = weights[0].dtype
    if dtype not in (*FLOAT_DTYPES.values(), torch.bfloat16):
        raise ValueError(f"{owner}: dtype must be a floating dtype, got {dtype}.")
    return layer_from_canonical(
        spec, weights, biases, dtype=dtype, device=torch.device("cpu"), owner=owner
    )

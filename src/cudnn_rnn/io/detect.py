"""The models that TF canonical names and shapes describe: one per scope and stack.

A safetensors checkpoint without our metadata and a TF1 checkpoint say what they hold only
through their tensors' names (:mod:`cudnn_rnn.core.tf_names`) and shapes; :func:`detect_models`
reads the model configurations from them, without reading any tensor.

>>> detect_models({
...     "rnn/multi_rnn_cell/cell_0/cudnn_compatible_gru_cell/gates/kernel": (5, 4),
...     "rnn/multi_rnn_cell/cell_0/cudnn_compatible_gru_cell/candidate/input_projection/kernel": (
...         3, 2),
...     "rnn/multi_rnn_cell/cell_0/cudnn_compatible_gru_cell/candidate/input_projection/bias": (2,),
... })[0]["num_units"]
2
"""

from __future__ import annotations

from typing import Any

from cudnn_rnn.core import tf_names
from cudnn_rnn.core.tf_names import TFName

__all__ = ["detect_models", "detect_models_and_skipped"]


def detect_models(shapes: dict[str, tuple[int, ...]]) -> list[dict[str, Any]]:
    """Model configurations implied by TF canonical names and shapes (one per scope and stack).

    Names are read by :func:`cudnn_rnn.core.tf_names.parse`. ``basic_rnn_cell`` does not record
    tanh or relu; such models are reported as ``rnn_tanh`` with ``"activation_known": False``.
    Groups of names that do not describe a model (a missing layer-0 tensor, a shape of the wrong
    rank) are left out; :func:`detect_models_and_skipped` also says why.
    """
    return detect_models_and_skipped(shapes)[0]


def detect_models_and_skipped(
    shapes: dict[str, tuple[int, ...]],
) -> tuple[list[dict[str, Any]], list[str]]:
    """:func:`detect_models`, plus one line per group of names it could not interpret."""
    groups: dict[tuple[str, str, str], list[tuple[TFName, tuple[int, ...]]]] = {}
    for name, shape in shapes.items():
        n = tf_names.parse(name)
        if n is None:
            continue
        groups.setdefault((n.scope or "", n.stack, n.cell), []).append((n, shape))
    models, skipped = [], []
    for (scope, stack, cell), members in sorted(groups.items()):
        try:
            models.append(_interpret(scope, stack, cell, members))
        except _Uninterpretable as why:
            where = f"{scope}/{stack}" if scope else stack
            skipped.append(f"{where} ({cell}): {why}")
    return models, skipped


class _Uninterpretable(Exception):
    """A group of canonical names that does not describe a model."""


def _interpret(
    scope: str, stack: str, cell: str, members: list[tuple[TFName, tuple[int, ...]]]
) -> dict[str, Any]:
    if any(n.layer > 999999 for n, _ in members):
        raise _Uninterpretable("a layer number above 999999")
    first = {n.variable: s for n, s in members if n.layer == 0 and n.direction != tf_names.BW}

    def dim(var: str, rank: int, axis: int) -> int:
        shape = first.get(var)
        if shape is None:
            raise _Uninterpretable(f"no layer-0 {var}")
        if len(shape) != rank:
            raise _Uninterpretable(f"layer-0 {var} has shape {list(shape)}, expected rank {rank}")
        return shape[axis]

    modes = tf_names.CELL_MODES[cell]  # basic_rnn_cell: tanh (TF's default) or relu
    mode = modes[0]
    if mode == "gru":
        units = dim(tf_names.CANDIDATE_INPUT_BIAS, 1, 0)
        input_size = dim(tf_names.CANDIDATE_INPUT_KERNEL, 2, 0)
        proj = None
    else:
        units = dim(tf_names.BIAS, 1, 0) // (4 if mode == "lstm" else 1)
        has_proj = tf_names.PROJECTION_KERNEL in first
        proj = dim(tf_names.PROJECTION_KERNEL, 2, 1) if has_proj else None
        input_size = dim(tf_names.KERNEL, 2, 0) - (proj or units)
    if units < 1 or input_size < 1:
        raise _Uninterpretable(
            f"the layer-0 shapes imply {units} units and input size {input_size}"
        )
    return {
        "rnn_mode": mode,
        "scope": scope or None,
        "num_layers": 1 + max(n.layer for n, _ in members),
        "num_units": units,
        "input_size": input_size,
        "num_proj": proj,
        "direction": "bidirectional" if stack == tf_names.BIDIRECTIONAL_STACK else "unidirectional",
        **({"activation_known": False} if len(modes) > 1 else {}),
    }

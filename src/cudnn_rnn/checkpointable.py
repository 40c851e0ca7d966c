"""The protocol between objects that own RNN parameters and :mod:`cudnn_rnn.checkpoint`.

An object is checkpointable when it can list its tensors under their TF canonical names (the
names ``tf.contrib.cudnn_rnn``'s saveables write, e.g.
``rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/kernel``), say which names and shapes it
expects on restore, and load a complete, already checked set of them in place.

The checkpoint module first gathers ``checkpoint_shapes()`` of every object, compares them with the
file's header (names, shapes, floating dtypes), reports every missing, unexpected, misshapen or
non-floating tensor in one error, reads the tensors, and only then calls ``checkpoint_load`` on
each object. ``checkpoint_load`` must itself be all-or-nothing (check and convert everything, then
write); should one object still refuse its tensors, the objects loaded before it are put back from
a snapshot of their parameters (``nn.Module``) or ``opaque_params``, so a failed restore changes
nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from torch import Tensor

#: A shape in ``checkpoint_shapes``; ``None`` for a dimension not known yet (an unbuilt cell's
#: input depth), which the file then decides.
Shape = tuple[int | None, ...]


@runtime_checkable
class Checkpointable(Protocol):
    def checkpoint_entries(self) -> dict[str, Tensor]:
        """Full canonical name -> tensor to save (detached, in the TF canonical layout)."""
        ...

    def checkpoint_shapes(self) -> dict[str, Shape]:
        """Full canonical name -> shape that restore expects."""
        ...

    def checkpoint_load(self, tensors: Mapping[str, Tensor]) -> None:
        """Load exactly the names of ``checkpoint_shapes`` (already checked), in place."""
        ...

    def checkpoint_spec(self) -> dict[str, Any]:
        """A JSON-able description of the model (mode, sizes, direction, ...) for the metadata."""
        ...

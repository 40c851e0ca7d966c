"""Bytes <-> data: every file the package reads or writes, below the layers.

Readers return data, never modules: :class:`~cudnn_rnn.io.found.FoundRNN` records of what a
file holds, and :class:`~cudnn_rnn.io.found.ReadRNN` (a spec, canonical tensors, notes) of one
RNN; writers take the same. Nothing here imports the operator, the layers, the cells or
``cudnn_rnn.nn``; :mod:`cudnn_rnn.converters` turns the data into our modules, above them.

- the safe-file layer: :mod:`~cudnn_rnn.io.files` (opening only regular files, the one bounded
  zip reader, sniffing by content, the one bounded JSON loader, escaping),
  :mod:`~cudnn_rnn.io.pickles` (the one bounded pickle reader), :mod:`~cudnn_rnn.io.atomic`
  (the one atomic writer), :mod:`~cudnn_rnn.io.once` (a file parsed once per operation);
- :mod:`~cudnn_rnn.io.registry`: the table of the formats read, from which detection,
  converters and the command's help derive;
- a module or folder a format family: :mod:`~cudnn_rnn.io.safetensors`, :mod:`~cudnn_rnn.io.npz`,
  :mod:`cudnn_rnn.io.tf1`, :mod:`cudnn_rnn.io.keras`, :mod:`cudnn_rnn.io.onnx`,
  :mod:`cudnn_rnn.io.torch`;
- what they share: :mod:`~cudnn_rnn.io.found`, :mod:`~cudnn_rnn.io.detect` (the models TF
  canonical names describe), :mod:`~cudnn_rnn.io.gate_blocks` (canonical tensors <-> per-gate
  blocks), :mod:`~cudnn_rnn.io.cudnn_layout` (where cuDNN put each tensor of a foreign buffer).

Every reader opens its files with :mod:`~cudnn_rnn.io.files` and derives its errors from
:class:`cudnn_rnn.io.files.FormatError`. This package imports nothing: import the module you
need (``from cudnn_rnn.io.tf1 import bundle``), so that a pure-NumPy format can be used where
torch is not installed.
"""

"""TF1 checkpoints, read and written without TensorFlow: one module a concern.

- :mod:`~cudnn_rnn.io.tf1.bundle`: the tensor bundle (``PREFIX.index`` + data shards): reading
  every tensor checked, and the format's public face; beside it
  :mod:`~cudnn_rnn.io.tf1.writer` (the writer), :mod:`~cudnn_rnn.io.tf1.protos` (the entry and
  header protos, the dtypes) and :mod:`~cudnn_rnn.io.tf1.prefix` (a prefix's files, the
  crash-safe overwrite); on
- :mod:`~cudnn_rnn.io.tf1.table`: the sorted string table of the index; on
- :mod:`~cudnn_rnn.io.tf1.protobuf_wire`: protobuf's wire format (varints and fields);
- :mod:`~cudnn_rnn.io.tf1.cells`: RNNs of TF's standard cells, found and read as canonical data,
  on :mod:`~cudnn_rnn.io.tf1.cell_kinds` (each cell scope, by kind) and
  :mod:`~cudnn_rnn.io.tf1.cell_stacks` (cells grouped into RNNs);
- :mod:`~cudnn_rnn.converters.tf1_opaque`: a training checkpoint's opaque kernel and optimizer
  slots, through the layout :mod:`cudnn_rnn.io.cudnn_layout` discovers;
- :mod:`~cudnn_rnn.converters.tf1_legacy`: the names older TF versions wrote.

The bundle and its layers need NumPy only. This package imports nothing: import the module you
need (``from cudnn_rnn.io.tf1 import bundle``).
"""

"""TF1 checkpoints, read and written without TensorFlow: one module a concern.

- :mod:`~cudnn_rnn.io.tf1.bundle`: the tensor bundle (``PREFIX.index`` + data shards): its
  protos, reading every tensor checked, the crash-safe writer; on
- :mod:`~cudnn_rnn.io.tf1.table`: the sorted string table of the index; on
- :mod:`~cudnn_rnn.io.tf1.protobuf_wire`: protobuf's wire format (varints and fields);
- :mod:`~cudnn_rnn.converters.tf1_opaque`: a training checkpoint's opaque kernel and optimizer
  slots, through the layout :mod:`cudnn_rnn.io.cudnn_layout` discovers;
- :mod:`~cudnn_rnn.converters.tf1_legacy`: the names older TF versions wrote.

The bundle and its layers need NumPy only. This package imports nothing: import the module you
need (``from cudnn_rnn.io.tf1 import bundle``).
"""

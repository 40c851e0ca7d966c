"""File formats and converters to and from the places users keep RNN weights.

One module a format (:mod:`~cudnn_rnn.formats.safetensors`, :mod:`~cudnn_rnn.formats.torch_file`,
:mod:`~cudnn_rnn.formats.onnx`, :mod:`~cudnn_rnn.formats.keras_h5`; TF1 checkpoints in the
subpackage :mod:`cudnn_rnn.formats.tf1`), the converters of live objects beside them
(:mod:`~cudnn_rnn.formats.torch_nn`, :mod:`~cudnn_rnn.formats.keras`). Every module that opens a
file does it with :mod:`cudnn_rnn.files`, below them all, and derives its errors from
:class:`cudnn_rnn.files.FormatError`; none imports :mod:`cudnn_rnn.checkpoint`, which stands
above them.

Each module is imported explicitly (``from cudnn_rnn.formats.tf1 import bundle``); this package
imports nothing, so a pure-NumPy format such as :mod:`cudnn_rnn.formats.tf1.bundle` can be used
where torch is not installed.
"""

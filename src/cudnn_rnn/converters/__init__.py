"""Data <-> modules, above the layers: the one builder (canonical data -> our layer,
:mod:`~cudnn_rnn.converters.canonical`), the one loader (``find_rnns``, ``load``:
:mod:`~cudnn_rnn.converters.loader`), and every ``from_*`` / ``to_*`` between our layers and
torch.nn's modules, Keras objects and the files :mod:`cudnn_rnn.io` reads and writes.
:mod:`cudnn_rnn.convert` and :mod:`cudnn_rnn.checkpoint` are their public fronts. This package
imports nothing: import the module you need."""

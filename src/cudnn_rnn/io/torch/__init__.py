"""torch files, read as data without running anything they name: ``torch.save`` archives and
legacy files of state_dicts (:mod:`~cudnn_rnn.io.torch.file`), pickled objects of any kind
(:mod:`~cudnn_rnn.io.torch.pickled`), TorchScript archives (:mod:`~cudnn_rnn.io.torch.torchscript`),
and torch.nn's parameter names (:mod:`~cudnn_rnn.io.torch.state`). This package imports nothing:
import the module you need."""

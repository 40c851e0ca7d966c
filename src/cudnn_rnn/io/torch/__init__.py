"""torch files, read as data without running anything they name: ``torch.save`` archives and
legacy files of state_dicts (:mod:`~cudnn_rnn.io.torch.file`), pickled objects of any kind
(:mod:`~cudnn_rnn.io.torch.pickled`; how each pickle is unpickled:
:mod:`~cudnn_rnn.io.torch.unpickling`; the legacy torch.save format:
:mod:`~cudnn_rnn.io.torch.legacy`; the tensors found, named by path:
:mod:`~cudnn_rnn.io.torch.contents`), TorchScript archives (:mod:`~cudnn_rnn.io.torch.torchscript`),
and torch.nn's parameter names (:mod:`~cudnn_rnn.io.torch.state`). This package imports nothing:
import the module you need."""

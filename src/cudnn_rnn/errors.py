"""The base of every error class of the package: ``except cudnn_rnn.CudnnRNNError`` catches them.

Each class also derives from the builtin it always derived from (``ValueError`` for a bad file,
``Exception`` for a usage error of the command line), so code written against that keeps
working. Standard library only: the bottom of the package.

>>> import cudnn_rnn
>>> from cudnn_rnn.checkpoint import CheckpointError
>>> issubclass(CheckpointError, cudnn_rnn.CudnnRNNError), issubclass(CheckpointError, ValueError)
(True, True)
"""

from __future__ import annotations

__all__ = ["CudnnRNNError"]


class CudnnRNNError(Exception):
    """Any error of cudnn_rnn's own classes (a checkpoint, model file or command line problem).

    Argument checks raise the builtins ``TypeError`` and ``ValueError`` as torch does; the
    classes below this one name what went wrong with a file or a command.
    """

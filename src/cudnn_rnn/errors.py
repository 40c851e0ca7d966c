"""The base of every error class of the package: ``except cudnn_rnn.CudnnRNNError`` catches them.

Each class also derives from the builtin it always derived from (``ValueError`` for a bad file,
``Exception`` for a usage error of the command line), so code written against that keeps
working. Standard library only: the bottom of the package.

:class:`FileAccessError` is the one error of a path that cannot be looked at or opened (a
symbolic link loop, a name too long, no permission, nothing there): an ``OSError`` that keeps the
operating system's ``errno``, ``strerror`` and ``filename``, and stays the builtin subclass the
operating system's error was (``FileNotFoundError``, ``PermissionError``...), while its message
names the path and says what to do.

>>> import cudnn_rnn
>>> from cudnn_rnn.checkpoint import CheckpointError
>>> issubclass(CheckpointError, cudnn_rnn.CudnnRNNError), issubclass(CheckpointError, ValueError)
(True, True)
"""

from __future__ import annotations

import errno
import os

__all__ = ["CudnnRNNError", "FileAccessError", "UsageError"]


class CudnnRNNError(Exception):
    """Any error of cudnn_rnn's own classes (a checkpoint, model file or command line problem).

    Argument checks raise the builtins ``TypeError`` and ``ValueError`` as torch does; the
    classes below this one name what went wrong with a file or a command.

    Example:

    >>> import os, tempfile, cudnn_rnn
    >>> with tempfile.TemporaryDirectory() as folder:  # (nothing left behind)
    ...     path = os.path.join(folder, "notes.txt")
    ...     with open(path, "w") as f:
    ...         _ = f.write("not a model")
    ...     try:
    ...         cudnn_rnn.find_rnns(path)
    ...     except cudnn_rnn.CudnnRNNError as error:
    ...         print(type(error).__name__, isinstance(error, ValueError))
    UnsupportedFormat True
    """


class UsageError(CudnnRNNError):
    """A choice the caller must make, or a problem the caller can fix (a file of several models
    and no name given, an activation the file does not record). The ``cudnn-rnn`` command
    prints it as one line and exits with 2; importable as ``cudnn_rnn.cli.UsageError`` and
    ``cudnn_rnn.converters.loader.UsageError`` too."""


#: errno -> what to do about it, for a path that cannot be read.
_WHAT_TO_DO = {
    errno.ENOENT: "check the path",
    errno.ELOOP: "symbolic links on the way lead round in a loop; fix or remove the link",
    errno.ENAMETOOLONG: "the path, or a name in it, is longer than the file system allows; "
    "shorten it",
    errno.EACCES: "ask for read permission on the file and search (x) permission on its folders",
    errno.EPERM: "ask for read permission on the file and search (x) permission on its folders",
    errno.ENOTDIR: "a part of the path is a file where a folder should be; correct the path",
    errno.EISDIR: "it is a directory; give the path of a file in it",
    errno.EIO: "the storage failed to read it; read it from a sound copy",
}


class FileAccessError(CudnnRNNError, OSError):
    """A path that cannot be looked at or opened, or a file that cannot be read: ``errno``,
    ``strerror`` and ``filename`` as the operating system gave them; ``str()`` names the path,
    the reason and what to do (``hint``). :meth:`from_os_error` makes one of the operating
    system's error, of the same builtin class (``FileNotFoundError`` stays one).

    >>> import errno
    >>> err = FileAccessError(errno.ELOOP, "Too many levels of symbolic links", "a")
    >>> str(err).split("; ")[0]
    'a: cannot read it: Too many levels of symbolic links (ELOOP)'
    >>> isinstance(err, OSError), err.errno == errno.ELOOP, err.filename
    (True, True, 'a')
    """

    def __init__(
        self, code: int | None, strerror: str | None, filename: str, hint: str | None = None
    ) -> None:
        super().__init__(code, strerror, filename)
        self.hint = hint or _WHAT_TO_DO.get(code or 0, "check the path and the file")

    def __str__(self) -> str:
        name = errno.errorcode.get(self.errno or 0, f"errno {self.errno}")
        return f"{self.filename}: cannot read it: {self.strerror} ({name}); {self.hint}."

    def __reduce__(self) -> tuple[type[FileAccessError], tuple[int | None, str | None, str, str]]:
        return type(self), (self.errno, self.strerror, self.filename, self.hint)

    @staticmethod
    def from_os_error(err: OSError, path: str | os.PathLike[str]) -> FileAccessError:
        """The error for ``err``, met on ``path``, of the builtin class ``err`` is."""
        kind = next((k for b, k in _OF_BUILTIN if isinstance(err, b)), FileAccessError)
        name = err.filename if isinstance(err.filename, str) else os.fspath(path)
        return kind(err.errno, err.strerror or str(err), name)


class _FileMissing(FileAccessError, FileNotFoundError):
    """Nothing at the path (ENOENT)."""


class _FileAccessDenied(FileAccessError, PermissionError):
    """No permission to look at or read the path (EACCES, EPERM)."""


class _PathNotADirectory(FileAccessError, NotADirectoryError):
    """A part of the path that should be a folder is a file (ENOTDIR)."""


class _PathIsADirectory(FileAccessError, IsADirectoryError):
    """The path is a directory (EISDIR)."""


_OF_BUILTIN: tuple[tuple[type[OSError], type[FileAccessError]], ...] = (
    (FileNotFoundError, _FileMissing),
    (PermissionError, _FileAccessDenied),
    (NotADirectoryError, _PathNotADirectory),
    (IsADirectoryError, _PathIsADirectory),
)

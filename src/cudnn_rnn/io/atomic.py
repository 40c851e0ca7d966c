"""The one atomic file writer: every file the library writes goes through :func:`write_file`.

A reader of ``path`` sees the old file or the new one, never a mix or a half-written file, however
the writing process ends (an exception, ``SIGKILL``, a full disk):

1. a temporary file is created beside ``path`` (same directory, so the rename cannot cross file
   systems) with ``os.open(..., 0o666)``: the kernel applies the umask, so the file gets the mode
   ``open(path, "wb")`` would give it; when ``path`` already exists, the temporary file is given
   the existing file's mode (``st_mode & 0o7777``) first, so an overwrite keeps it;
2. the content is written, flushed and ``fsync``'ed;
3. ``os.replace`` moves it onto ``path`` (atomic on POSIX and Windows);
4. the directory is ``fsync``'ed, where the OS allows it, so the rename itself is durable.

On any failure (``BaseException`` included) the temporary file is removed and the target is left as
it was. An ``OSError`` of the write is raised again as the same class, with ``filename`` the target
(never the temporary file) and a ``strerror`` that says what stands in the way and how to fix it
(:func:`write_problem`); an error about another file (one a content callable reads) is left as it
is. Ownership, ACLs and extended attributes of an overwritten file are not carried over.

**Only a regular file is replaced.** ``os.replace`` swaps whatever directory entry ``path`` names
for the new file: a FIFO, a socket or a device node (``/dev/null``, for a writer running as root)
would silently become a regular file. So before anything is written, and again just before the
rename, ``path`` is looked at (``os.stat``: symbolic links followed), and anything there that is
not a regular file (a directory, a FIFO, a character or block device, a socket), or a symbolic
link to one, is refused with :class:`NotRegularTarget` (an ``OSError``; for a directory also an
``IsADirectoryError``) naming the path and what it is; nothing is written. A symbolic link to a
regular file is replaced by the new file (the link, as ``os.replace`` does; the file it pointed to
is left as it was); so is a dangling link or a link loop: nothing lies behind it to lose, and the
new file is what the caller asked for at that name. What appears at ``path`` between the last look
and the rename is still replaced: a rename cannot be made conditional on what it replaces.
:func:`check_replaceable` is that look, for writers that must refuse before they start.

**Temporary names and their cleanup.** The temporary file of ``DIR/NAME`` is
``DIR/.NAME.cudnn-rnn-PID-TOKEN.tmp``: hidden, derived from the target's name, carrying the writer's
process id ``PID`` and a random hex ``TOKEN``. A name too long to leave room for that (over 200
bytes, where file systems allow 255) is cut to its first 190 bytes plus ``~`` and 8 hex digits of
its SHA-256, so that a legal name never gives an illegal temporary one. Only a process killed
between steps 1 and 3 leaves one behind. So that they do not pile up, every write of ``DIR/NAME``
first removes the leftover temporary files of that same target, except those that may be in use: a
temporary file is left alone when its ``PID`` is a live process other than this one
(``os.kill(PID, 0)`` succeeds or is refused for permission), or is this process and the file is in
this process's registry of writes in flight (a lock-protected set). A process that died, or a
temporary file of this process that no write owns, is garbage; one that cannot be removed (a
read-only directory) stays for a later write. A reused PID only delays the cleanup; on Windows,
where signal 0 cannot be sent safely, temporary files of other processes are always kept. Processes
in other PID namespaces (containers) sharing the directory look dead: do not let them write the
same path at once.

:func:`link_or_copy`, :func:`replace` and :func:`remove` are the steps that multi-file protocols
(the TF1 bundle's crash-safe overwrite) build on; :func:`directory_lock` serialises such protocols.
:func:`path_problem` and :func:`write_problem` put a failed path into words (which part of it is at
fault, and how to fix it), for this module's errors and for the command line's.

This module is standard library only, but for :func:`cudnn_rnn.io.files.special_kind` (the words
for what a path is, shared with the readers) and the error base :class:`cudnn_rnn.CudnnRNNError`
(both standard library only, importing nothing else of the package), so every module can use it.

>>> import os, pathlib, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "notes.txt")
>>> write_file(path, b"hello")
>>> write_file(path, lambda f: f.write(b" world"))
>>> pathlib.Path(path).read_bytes(), os.listdir(os.path.dirname(path))
(b' world', ['notes.txt'])
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import shutil
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from typing import BinaryIO

from cudnn_rnn.errors import CudnnRNNError
from cudnn_rnn.io.files.opening import special_kind

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "NotRegularTarget",
    "check_replaceable",
    "directory_lock",
    "fsync_directory",
    "link_or_copy",
    "path_problem",
    "remove",
    "remove_leftovers",
    "replace",
    "write_file",
    "write_problem",
]

Content = bytes | bytearray | memoryview | Callable[[BinaryIO], object]

#: Test hook: when set, called with a label (``"write"``, ``"fsync"``, ``"replace"``, ``"link"``,
#: ``"unlink"``) just before each step that changes what is on disk, so a test can stop a writer
#: (raise, or kill the process) at every step in turn. Never set outside tests.
_BOUNDARY: Callable[[str], None] | None = None

_TAG = "cudnn-rnn"
_in_flight: set[str] = set()  # names of this process's temporary files being written
_in_flight_lock = threading.Lock()
_fallback_lock = threading.Lock()  # directory_lock where the OS has no flock


class NotRegularTarget(CudnnRNNError, OSError):
    """A write refused before anything was written: ``filename`` is there and is not a regular
    file (``kind``, in words: ``"a FIFO (named pipe)"``, ``"a character device"``...), or is a
    symbolic link (``link``, what it points to) to such a thing. ``errno`` is None: the refusal
    is ours, not the system's. ``problem`` says it in one line (:func:`write_problem` gives it).
    """

    def __init__(self, path: str, kind: str, link: str | None = None) -> None:
        what = kind if link is None else f"a symbolic link to {kind} ({link})"
        if kind == "a directory":
            self.problem = f"{path} is {what}; remove it or choose another name"
        else:  # never "remove it": it may be /dev/null
            self.problem = (
                f"{path} is {what}, not a regular file; only a regular file is replaced: "
                "choose another name"
            )
        super().__init__(f"cannot write: {self.problem}")
        self.filename = path
        self.kind = kind
        self.link = link

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[type[NotRegularTarget], tuple[str, str, str | None]]:
        return type(self), (self.filename, self.kind, self.link)


class _DirectoryTarget(NotRegularTarget, IsADirectoryError):
    """A directory where a file is to be written: an ``IsADirectoryError`` too."""


def check_replaceable(path: str | os.PathLike[str]) -> None:
    """Refuse ``path`` as a file to write unless nothing is there, or a regular file, or a
    symbolic link to one, or a dangling link (see "Only a regular file is replaced" in the
    module): raises :class:`NotRegularTarget` naming it and what it is."""
    target = os.fspath(path)
    try:
        info = os.stat(target)
    except (OSError, ValueError):
        return  # nothing, a dangling link or a loop (replaced); or what the write will report
    kind = special_kind(info.st_mode)
    if kind is None:
        return
    link = None
    with contextlib.suppress(OSError):
        if os.path.islink(target):
            link = os.readlink(target)
    error = _DirectoryTarget if stat.S_ISDIR(info.st_mode) else NotRegularTarget
    raise error(target, kind, link)


def _boundary(label: str) -> None:
    hook = _BOUNDARY
    if hook is not None:
        hook(label)


def _split(path: str | os.PathLike[str]) -> tuple[str, str]:
    target = os.path.abspath(os.fspath(path))
    directory, name = os.path.split(target)
    if not name:
        raise IsADirectoryError(f"cannot write {os.fspath(path)!r}: it names a directory")
    return directory, name


#: Names longer than this (in bytes) are shortened in temporary names: the tag, a 7-digit PID, the
#: token and the dots add 40 bytes, and 255 is the most a name may have on common file systems.
_STEM_BYTES = 200


def _stem(name: str) -> str:
    """The part of ``name`` its temporary files carry: ``name`` itself, or a shortened form that
    is just as unique."""
    raw = os.fsencode(name)
    if len(raw) <= _STEM_BYTES:
        return name
    digest = hashlib.sha256(raw).hexdigest()[:8]
    # Cut on a character boundary: an incomplete UTF-8 sequence at the end is dropped.
    return raw[:190].decode(sys.getfilesystemencoding(), "ignore") + "~" + digest


def _temp_name(name: str) -> str:
    return f".{_stem(name)}.{_TAG}-{os.getpid()}-{secrets.token_hex(8)}.tmp"


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False  # never a writer's pid; kill(0) would signal our process group
    if sys.platform == "win32":
        return True  # os.kill would terminate the process: keep what we cannot check
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except OSError:  # PermissionError: alive, someone else's
        return True
    return True


def _in_use(pid: int, name: str) -> bool:
    if pid == os.getpid():
        with _in_flight_lock:
            return name in _in_flight
    return _pid_alive(pid)


def remove_leftovers(path: str | os.PathLike[str]) -> None:
    """Remove the temporary files of ``path`` that crashed writers left (see the module doc)."""
    directory, name = _split(path)
    pattern = re.compile(re.escape(f".{_stem(name)}.{_TAG}-") + r"(\d+)-[0-9a-f]+\.tmp\Z")
    try:
        entries = [e.name for e in os.scandir(directory)]
    except OSError:
        return
    for entry in entries:
        match = pattern.match(entry)
        if match and not _in_use(int(match[1]), entry):
            _boundary("unlink")
            # Best effort: one that cannot be removed (a read-only directory) stays for later.
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, entry))


@contextlib.contextmanager
def _temporary(directory: str, name: str) -> Iterator[str]:
    """A registered temporary path for target ``name``; removed unless the body renamed it."""
    remove_leftovers(os.path.join(directory, name))
    temp = _temp_name(name)
    path = os.path.join(directory, temp)
    with _in_flight_lock:
        _in_flight.add(temp)
    try:
        yield path
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    finally:
        with _in_flight_lock:
            _in_flight.discard(temp)


def _existing_mode(path: str) -> int | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else None


def write_file(
    path: str | os.PathLike[str],
    content: Content,
    *,
    mode_of: str | os.PathLike[str] | None = None,
) -> None:
    """Write ``content`` to ``path`` atomically (see the module doc).

    ``content`` is the bytes, or a callable that writes them into the binary file object it is
    given (``torch.save``, ``onnx.save_model``, ``savefig`` and the like take one). A new file
    gets the permission bits ``open()`` would give it under the umask; an overwritten one keeps
    its own, or, given ``mode_of``, the file takes the bits of that file where it exists (for a
    file written under one name and renamed onto another later). The directory must exist.
    """
    directory, name = _split(path)
    target = os.path.join(directory, name)
    check_replaceable(target)  # before anything is written
    mode = _existing_mode(target if mode_of is None else os.fspath(mode_of))
    with _naming(target) as about:
        with _temporary(directory, name) as temp:
            about.add(temp)
            _fill(temp, content, mode)
            check_replaceable(target)  # again: writing may have taken long
            _boundary("replace")
            os.replace(temp, target)
    fsync_directory(directory)


def _fill(path: str, content: Content, mode: int | None) -> None:
    """Create the new file ``path`` (mode 0o666 less the umask, or ``mode``), write ``content``
    into it and flush it to disk."""
    # "x": O_CREAT | O_EXCL; mode 0o666 so that the kernel applies the umask, as open() does.
    with open(path, "xb", opener=_opener) as f:
        if mode is not None:
            _chmod(f, path, mode)
        _boundary("write")
        if callable(content):
            content(f)
        else:
            f.write(content)
        f.flush()
        _boundary("fsync")
        os.fsync(f.fileno())


def _opener(path: str, flags: int) -> int:
    return os.open(path, flags | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0), 0o666)


def _chmod(f: BinaryIO, path: str, mode: int) -> None:
    if hasattr(os, "fchmod"):
        os.fchmod(f.fileno(), mode)
    else:
        os.chmod(path, mode)


def link_or_copy(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """Make ``dst`` a hard link to ``src`` (a copy, with ``src``'s mode, where the file system has
    no hard links), replacing ``dst`` atomically; nothing to do when they are already one file.
    Only a regular file is replaced (:func:`check_replaceable`), and only a regular file is
    copied: a FIFO would block the copy, a device never end it."""
    directory, name = _split(dst)
    target = os.path.join(directory, name)
    source = os.fspath(src)
    with contextlib.suppress(OSError):
        if os.path.samefile(source, target):
            return
    check_replaceable(target)
    with _naming(target) as about, _temporary(directory, name) as temp:
        about.add(temp)
        _boundary("link")
        try:
            os.link(source, temp)
        except FileExistsError:
            raise
        except OSError:  # no hard links here (FAT, some network shares, protected_hardlinks)
            _check_copied(source)
            with open(source, "rb") as f:
                _fill(temp, lambda out: shutil.copyfileobj(f, out), _existing_mode(source))
        check_replaceable(target)
        _boundary("replace")
        os.replace(temp, target)
    fsync_directory(directory)


def _check_copied(source: str) -> None:
    """Refuse to copy ``source`` unless it is a regular file (links followed)."""
    try:
        kind = special_kind(os.stat(source).st_mode)
    except (OSError, ValueError):
        return  # the open that follows reports it
    if kind is not None:
        raise OSError(f"cannot copy {source}: it is {kind}, not a regular file")


def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """``os.replace(src, dst)``, then make the rename durable; an error names ``dst``. Only a
    regular file is replaced (:func:`check_replaceable`)."""
    check_replaceable(dst)
    _boundary("replace")
    with _naming(os.fspath(dst)) as about:
        about.add(os.fspath(src))
        os.replace(src, dst)
    fsync_directory(_split(dst)[0])


def remove(path: str | os.PathLike[str]) -> None:
    """Remove the file ``path`` if it exists."""
    if os.path.lexists(path):
        _boundary("unlink")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


@contextlib.contextmanager
def _naming(target: str) -> Iterator[set[str]]:
    """Raise an ``OSError`` of the body again naming ``target`` and saying why (see
    :func:`write_problem`), when it names no file or one of the paths the body adds to the set
    it is given (the temporary files that stand for ``target``)."""
    about = {target}
    try:
        yield about
    except OSError as err:
        if isinstance(err, NotRegularTarget):
            raise  # a refusal of ours, naming its path
        if err.errno is None or (err.filename is not None and err.filename not in about):
            raise  # a message of ours, or an error about another file
        raise type(err)(err.errno, f"cannot write: {write_problem(target, err)}", target) from err


def _name_max(directory: str) -> int:
    """The most bytes a name may have in ``directory`` (255 where the system cannot say)."""
    try:
        limit = os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):  # no pathconf (Windows), or no such directory
        return 255
    return limit if limit > 0 else 255


def _clip(name: str) -> str:
    return repr(name if len(name) <= 40 else name[:37] + "...")


def path_problem(path: str | os.PathLike[str]) -> str | None:
    """What stops ``path`` from being looked up, naming the part of it at fault and saying how to
    fix it; ``None`` when nothing does (``path`` exists, or only its last part is missing).

    Each leading part of ``path`` is looked up in turn (links followed), so that the answer
    names the first one at fault: a directory that cannot be searched, a file where a directory
    should be, a symbolic link loop, a name too long for the file system, a missing directory.
    """
    parts: list[str] = []  # a/b/c -> a, a/b, a/b/c; /a/b -> /, /a, /a/b
    head = os.fspath(path)
    while head and (not parts or head != parts[-1]):
        parts.append(head)
        head = os.path.dirname(head)
    parts.reverse()
    parent = os.curdir
    for i, part in enumerate(parts):
        try:
            os.stat(part)
        except OSError as err:
            return _part_problem(part, parent, err, last=i == len(parts) - 1)
        except ValueError:  # an embedded NUL
            return "the path holds a NUL character, which no file name may; correct the path"
        parent = part
    return None


def _part_problem(part: str, parent: str, err: OSError, *, last: bool) -> str | None:
    code = err.errno
    if code == errno.ENOENT:
        if last:
            return None
        if os.path.islink(part):
            return f"{part} is a symbolic link to a missing {os.readlink(part)}; fix the link"
        return f"the directory {part} does not exist; create it or correct the path"
    if code in (errno.EACCES, errno.EPERM):  # looking up a name needs search (x) on its parent
        return (
            f"the directory {parent} cannot be searched (permission denied); ask for search (x) "
            "permission on it, or use another path"
        )
    if code == errno.ENOTDIR:
        return f"{parent} is not a directory; correct the path"
    if code == errno.ELOOP:
        return f"{part} is a symbolic link loop (too many levels of links); fix or remove the link"
    if code == errno.ENAMETOOLONG:
        name, limit = os.path.basename(part), _name_max(parent)
        size = len(os.fsencode(name))
        if size > limit:
            return (
                f"the name {_clip(name)} is {size} bytes, more than the {limit} a name may have "
                "here; choose a shorter one"
            )
        return f"the path is longer than the system allows ({os.strerror(code)}); shorten it"
    return f"{part}: {os.strerror(code) if code else err}"


def write_problem(path: str | os.PathLike[str], err: OSError) -> str:
    """Why writing the file ``path`` failed with ``err``, naming the part of the path at fault and
    saying how to fix it (one line)."""
    text = os.fspath(path)
    if isinstance(err, NotRegularTarget):
        return err.problem
    if err.errno is None:  # already one of our messages
        return str(err)
    problem = path_problem(text)
    if problem is not None:
        return problem
    directory = os.path.dirname(text) or os.curdir
    code = err.errno
    if code == errno.EISDIR and os.path.isdir(text):
        return f"{text} is a directory; remove it or choose another name"
    if code in (errno.EACCES, errno.EPERM):
        return (
            f"the directory {directory} is not writable (permission denied); choose one you can "
            "write to"
        )
    if code == errno.EROFS:
        return f"{directory} is on a read-only file system; write elsewhere"
    if code in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return f"{os.strerror(code)}; free some space or write elsewhere"
    if code == errno.ENAMETOOLONG:  # not its own name: one of a file written beside it
        return (
            f"a file written beside it gets a name over the {_name_max(directory)} bytes a name "
            "may have here; choose a shorter name"
        )
    # The error's own words may already be ours (one this module raised for a file written
    # for ``path``): the system's words for its code are said once.
    return os.strerror(code)


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Flush a directory's entries (renames, new files) to disk; a no-op where the OS cannot."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def directory_lock(directory: str | os.PathLike[str]) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``directory`` (``flock``; a process-wide lock where the
    OS or file system has none), for writers that change several files of one directory."""
    fd = -1
    if fcntl is not None:
        with contextlib.suppress(OSError):
            fd = os.open(directory, os.O_RDONLY)
    try:
        if fd >= 0:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                os.close(fd)
                fd = -1
        if fd >= 0:
            yield
        else:
            with _fallback_lock:
                yield
    finally:
        if fd >= 0:
            os.close(fd)  # releases the lock

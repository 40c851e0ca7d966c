"""Corruptions of a Keras 2 ``.h5`` file that hang, crash or trip HDF5 (found by experiment).

They apply to a file written by Keras 2 (``tests/fixtures/keras2/``): its name lists are
variable-length strings, kept in a global heap. Through the old in-process reader, the first made
``from_keras_h5`` and ``cudnn-rnn inspect`` loop forever, the second killed the process with
SIGSEGV inside HDF5 and the third raised h5py's bare TypeError. Used by ``test_keras_h5.py`` and
the fuzz run (``fuzz_worker.py``).
"""

from __future__ import annotations

HEAP = b"GCOL"  # a global heap collection's signature


def heap_loop(data: bytearray) -> None:
    """Zero 10 bytes of the global heap: the header (index, reference count, size) of its second
    object, which then reads as a free-space object of size 0; HDF5 walks the heap forever."""
    first = data.index(HEAP) + 16  # after the collection's header
    size = int.from_bytes(data[first + 8 : first + 16], "little")
    second = first + 16 + -(-size // 8) * 8  # an object: a 16-byte header, then 8-aligned data
    data[second : second + 10] = bytes(10)


def weight_names_datatype(data: bytearray) -> int:
    """Where the datatype of the first ``weight_names`` attribute message starts: after its name
    (13 bytes with the NUL, padded to 16), a variable-length string type (class 9, version 1)."""
    at = data.index(b"weight_names\0") + 16
    if data[at] != 0x19:
        raise ValueError(f"not a Keras 2 attribute message at {at}: {bytes(data[at : at + 4])!r}")
    return at


def weight_names_segv(data: bytearray) -> None:
    """One byte: the variable-length type's kind, set to one that does not exist (SIGSEGV)."""
    data[weight_names_datatype(data) + 1] = 0xFF


def weight_names_encoding(data: bytearray) -> None:
    """One byte: the character set, set to neither ASCII nor UTF-8 (h5py: TypeError)."""
    data[weight_names_datatype(data) + 2] = 0x02

"""The one bounded JSON loader: every JSON document the readers parse goes through it.

A Keras 3 ``config.json``, a Keras ``.h5`` file's ``model_config``, a safetensors header and its
``models`` metadata are all read by :func:`load_json`: its size and the depth its arrays and
objects nest to are checked first, by one linear scan that skips strings (a bracket inside a
string does not count, :func:`json_depth`), and a document deeper than :data:`MAX_JSON_DEPTH`
is refused before ``json.loads`` sees it, so that no reader can be driven into a
``RecursionError`` (or, with a raised recursion limit, a crash). Standard library only.
"""

from __future__ import annotations

import array
import itertools
import json
from collections.abc import Callable
from typing import Any, Final

from cudnn_rnn.io.files.escaping import clip, first_line

__all__ = ["MAX_JSON_DEPTH", "json_depth", "load_json"]

#: The deepest nesting of arrays and objects :func:`load_json` accepts. The files read hold far
#: less (a Keras config about 10 levels, 3 more per model nested in a model; a safetensors header
#: 3); Python's parser recurses once per level and its recursion limit (1000 by default) is
#: shared with the caller's stack, which this leaves room for.
MAX_JSON_DEPTH: Final = 200

# Brackets as signed steps (+1 in, -1 out); every other byte deleted.
_JSON_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_JSON_OTHER = bytes(b for b in range(256) if b not in b"[]{}")
_JSON_BLOCK = 1 << 16  # bytes scanned at a time: what one block's pieces take is bounded


def json_depth(text: bytes) -> int:
    """How deep the arrays and objects of the JSON text ``text`` (UTF-8) nest, in one linear
    pass that skips strings (a bracket in one does not count).

    Escapes go first: each escaped backslash (``\\\\``), then each escaped quote (``\\"``, which
    ends no string); then, block by block, the quotes split the text into what is outside
    strings and inside them (the rest of the text, after an unterminated one), and the brackets
    outside are counted in and out. Memory: one copy of ``text`` where it holds a backslash,
    and a bounded block's pieces.

    >>> json_depth(b'{"a": [[1], "]]]["], "b": {}}')
    3
    """
    if b"\\" in text:
        text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    inside = False  # in a string at the start of the block
    depth = deepest = 0
    for start in range(0, len(text), _JSON_BLOCK):
        pieces = text[start : start + _JSON_BLOCK].split(b'"')
        outside = b"".join(pieces[1::2] if inside else pieces[0::2])
        inside ^= len(pieces) % 2 == 0  # an odd number of quotes
        steps = array.array("b", outside.translate(_JSON_STEPS, _JSON_OTHER))
        if steps:
            deepest = max(deepest, max(itertools.accumulate(steps, initial=depth)))
            depth += sum(steps)
    return deepest


def load_json(
    data: bytes | bytearray | memoryview | str,
    fail: Callable[[str], Exception],
    *,
    max_size: int | None = None,
    max_depth: int = MAX_JSON_DEPTH,
) -> Any:
    """The JSON document ``data`` (UTF-8 bytes, or text), checked before it is parsed: at most
    ``max_size`` bytes (None: no bound), nesting at most ``max_depth`` arrays and objects deep
    (:func:`json_depth`: linear time, a few copies of ``data`` at most in memory).

    Any problem raises ``fail(reason)``, the reader's own error naming its file, where
    ``reason`` follows the document's name: ``"is N bytes, more than the M read"``, ``"nests
    too deeply: D levels of arrays and objects, more than the B read"``, ``"is not JSON
    (...)"`` (UTF-8 errors included). Never a ``RecursionError``.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if max_size is not None and len(raw) > max_size:
        raise fail(f"is {len(raw)} bytes, more than the {max_size} read")
    depth = json_depth(raw)
    if depth > max_depth:
        raise fail(
            f"nests too deeply: {depth} levels of arrays and objects, more than the {max_depth} "
            "read"
        )
    try:
        text = data if isinstance(data, str) else raw.decode("utf-8")
        return json.loads(text)
    except UnicodeDecodeError as err:
        raise fail(f"is not JSON (not UTF-8: {err.reason} at byte {err.start})") from None
    except RecursionError:  # a caller already deep in its own stack
        raise fail(f"nests too deeply for the stack left ({depth} levels)") from None
    except ValueError as err:  # JSONDecodeError; an integer of too many digits
        raise fail(f"is not JSON ({clip(first_line(err))})") from None

"""The protobuf wire format, only as much of it as TensorFlow's checkpoint protos need.

A message is a sequence of fields, each a tag (``field_number << 3 | wire_type``, a varint) and a
value: a varint (wire type 0), 8 or 4 little-endian bytes (1, 5), or a varint length and that many
bytes (2: strings, nested messages, packed repeated fields). A varint is base-128, least
significant group first, the high bit of each byte saying "more follows"::

    >>> encode_varint(300).hex()
    'ac02'
    >>> read_varint(b"\\xac\\x02", 0, 2, 64, "example")
    (300, 2)
    >>> message = varint_field(1, 7) + bytes_field(2, b"hi")
    >>> parse_message(message, "example")
    {1: [(0, 7)], 2: [(2, b'hi')]}

The parsers trust nothing: every length is checked against the bytes that remain and anything
malformed raises :class:`Malformed` (the caller adds the file's name). They never recurse:
:func:`parse_message` and :func:`scan_fields` read one level, a nested message's bytes kept as
a payload; a caller descends only into the fields its schema names (a TF1 index: entry ->
shape -> dimension, header -> version), so the nesting read is the schema's, a field of any
depth it does not name is skipped as bytes, and the time is linear in the message (each level
of the schema copies its payloads once). The encoders write what
protobuf's own serializer writes (fields in order, proto3 defaults omitted).
"""

from __future__ import annotations

from cudnn_rnn.errors import CudnnRNNError

__all__ = [
    "BYTES",
    "FIXED32",
    "FIXED64",
    "VARINT",
    "Field",
    "Malformed",
    "Span",
    "bytes_field",
    "encode_varint",
    "fixed32_field",
    "int_field",
    "message_fields",
    "parse_message",
    "read_varint",
    "repeated_ints",
    "scan_fields",
    "signed",
    "varint_field",
]

VARINT, FIXED64, BYTES, FIXED32 = 0, 1, 2, 5  # the wire types used here
Field = tuple[int, int | bytes]  # (wire type, value)
# One field as scan_fields returns it: (number, wire type, value, end). For varint and fixed-width
# fields ``value`` is the integer and ``end`` is 0; for a length-delimited field the payload is
# ``buf[value:end]`` (offsets, not a copy: an index holds hundreds of thousands of these).
Span = tuple[int, int, int, int]


class Malformed(CudnnRNNError):
    """Raised while parsing; the public function that parses a file adds its path and re-raises
    its own error type."""


def read_varint(buf: bytes, pos: int, end: int, bits: int, what: str) -> tuple[int, int]:
    """Decode a varint of at most ``bits`` bits at ``buf[pos:end]``; return it and the new pos."""
    result = shift = 0
    max_shift = 7 * -(-bits // 7)  # a 64-bit varint has at most 10 bytes, a 32-bit one 5
    while True:
        if pos >= end:
            raise Malformed(f"{what}: truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
        if shift >= max_shift:
            raise Malformed(f"{what}: varint longer than a {bits}-bit integer allows")
    if result >> bits:
        raise Malformed(f"{what}: varint {result} does not fit in {bits} bits")
    return result, pos


def scan_fields(buf: bytes, pos: int, end: int, what: str) -> list[Span]:
    """Every field of the message at ``buf[pos:end]``, in order, each checked to lie inside it.

    The one-byte varints that make up nearly all of a checkpoint's protos are decoded inline;
    this loop is what parsing an index costs, once per entry.
    """
    out: list[Span] = []
    while pos < end:
        tag = buf[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = read_varint(buf, pos, end, 32, what)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise Malformed(f"{what}: protobuf field number 0")
        if wire == VARINT or wire == BYTES:
            if pos < end and buf[pos] < 0x80:
                value = buf[pos]
                pos += 1
            else:
                value, pos = read_varint(buf, pos, end, 64, what)
            if wire == VARINT:
                out.append((number, wire, value, 0))
                continue
            if value > end - pos:
                raise Malformed(
                    f"{what}: field {number} declares {value} bytes, only {end - pos} remain"
                )
            out.append((number, wire, pos, pos + value))
            pos += value
        elif wire == FIXED64 or wire == FIXED32:
            width = 8 if wire == FIXED64 else 4
            if end - pos < width:
                raise Malformed(f"{what}: truncated fixed-width field {number}")
            out.append((number, wire, int.from_bytes(buf[pos : pos + width], "little"), 0))
            pos += width
        else:
            raise Malformed(f"{what}: unsupported protobuf wire type {wire} (field {number})")
    return out


def parse_message(buf: bytes, what: str) -> dict[int, list[Field]]:
    """Field number -> every (wire type, value) occurrence, in order (payloads as bytes)."""
    fields: dict[int, list[Field]] = {}
    for number, wire, value, end in scan_fields(buf, 0, len(buf), what):
        fields.setdefault(number, []).append((wire, buf[value:end] if wire == BYTES else value))
    return fields


def signed(value: int, bits: int, what: str) -> int:
    """A varint's value as the signed ``bits``-bit integer (int32/int64/enum) it encodes."""
    if value >= 1 << 63:
        value -= 1 << 64
    if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        raise Malformed(f"{what} = {value} is out of range for int{bits}")
    return value


def int_field(fields: dict[int, list[Field]], number: int, bits: int, what: str) -> int:
    """A signed varint field (int32/int64/enum); proto3 default 0; the last occurrence wins."""
    if number not in fields:
        return 0
    wire, value = fields[number][-1]
    if wire != VARINT or not isinstance(value, int):
        raise Malformed(f"{what}: field {number} has wire type {wire}, expected a varint")
    return signed(value, bits, f"{what}: field {number}")


def repeated_ints(occurrences: list[Field], what: str) -> list[int]:
    """A repeated int32 field, packed (proto3's default) or not."""
    values: list[int] = []
    for wire, value in occurrences:
        if wire == VARINT and isinstance(value, int):
            values.append(value)
        elif wire == BYTES and isinstance(value, bytes):
            pos = 0
            while pos < len(value):
                item, pos = read_varint(value, pos, len(value), 64, what)
                values.append(item)
        else:
            raise Malformed(f"{what}: wire type {wire}, expected varints")
    return [v - (1 << 64) if v >= 1 << 63 else v for v in values]


def message_fields(fields: dict[int, list[Field]], number: int, what: str) -> list[bytes]:
    """The payloads of every occurrence of the message field ``number``."""
    payloads = []
    for wire, value in fields.get(number, []):
        if wire != BYTES or not isinstance(value, bytes):
            raise Malformed(f"{what}: field {number} has wire type {wire}, expected a message")
        payloads.append(value)
    return payloads


def encode_varint(value: int) -> bytes:
    """``value`` (not negative) as a varint."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint_field(number: int, value: int) -> bytes:
    """A varint field, omitted when 0 (proto3 default), as protobuf serializes it."""
    return encode_varint(number << 3 | VARINT) + encode_varint(value) if value else b""


def bytes_field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (a string or a nested message), always written."""
    return encode_varint(number << 3 | BYTES) + encode_varint(len(payload)) + payload


def fixed32_field(number: int, value: int) -> bytes:
    """A fixed32 field, omitted when 0 (proto3 default)."""
    return encode_varint(number << 3 | FIXED32) + value.to_bytes(4, "little") if value else b""

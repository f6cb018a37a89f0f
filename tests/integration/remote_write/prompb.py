"""Prometheus remote-write request bodies in pure Python (standard library only): snappy block
decompression and the few protobuf messages of WriteRequest, for the tests' fake receivers.
Written from the snappy format description and the protobuf wire format; hostile input raises
ValueError."""

import struct


def _varint(data, pos):
    result = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def snappy_decompress(data, max_bytes=64 << 20):
    """snappy's block format (not the framed one)."""
    length, pos = _varint(data, 0)
    if length > max_bytes:
        raise ValueError("uncompressed length %d too large" % length)
    out = bytearray()
    while pos < len(data):
        tag = data[pos]
        pos += 1
        kind = tag & 3
        if kind == 0:  # literal
            n = tag >> 2
            if n >= 60:
                extra = n - 59
                n = int.from_bytes(data[pos:pos + extra], "little")
                pos += extra
            n += 1
            if pos + n > len(data):
                raise ValueError("truncated literal")
            out += data[pos:pos + n]
            pos += n
            continue
        if kind == 1:
            n = ((tag >> 2) & 7) + 4
            offset = ((tag >> 5) << 8) | data[pos]
            pos += 1
        elif kind == 2:
            n = (tag >> 2) + 1
            offset = int.from_bytes(data[pos:pos + 2], "little")
            pos += 2
        else:
            n = (tag >> 2) + 1
            offset = int.from_bytes(data[pos:pos + 4], "little")
            pos += 4
        if offset == 0 or offset > len(out):
            raise ValueError("bad copy offset")
        for _ in range(n):  # may overlap what it writes
            out.append(out[-offset])
    if len(out) != length:
        raise ValueError("decompressed %d bytes, header says %d" % (len(out), length))
    return bytes(out)


def _fields(data):
    """(field number, wire type, value) of one message."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value = data[pos:pos + 8]
            pos += 8
        elif wire == 2:
            n, pos = _varint(data, pos)
            value = data[pos:pos + n]
            pos += n
        elif wire == 5:
            value = data[pos:pos + 4]
            pos += 4
        else:
            raise ValueError("unsupported wire type %d" % wire)
        if pos > len(data):
            raise ValueError("truncated field")
        yield number, wire, value


def parse_write_request(body):
    """snappy-compressed WriteRequest → [(labels as a list of (name, value)), [(ts_ms, value)])]."""
    raw = snappy_decompress(body)
    series = []
    for number, wire, value in _fields(raw):
        if number != 1 or wire != 2:
            continue
        labels, samples = [], []
        for n2, w2, v2 in _fields(value):
            if n2 == 1 and w2 == 2:
                label = {1: "", 2: ""}
                for n3, w3, v3 in _fields(v2):
                    if w3 == 2 and n3 in label:
                        label[n3] = v3.decode("utf-8")
                labels.append((label[1], label[2]))
            elif n2 == 2 and w2 == 2:
                sample = {1: 0.0, 2: 0}
                for n3, w3, v3 in _fields(v2):
                    if n3 == 1 and w3 == 1:
                        sample[1] = struct.unpack("<d", v3)[0]
                    elif n3 == 2 and w3 == 0:
                        sample[2] = v3 - (1 << 64) if v3 >= 1 << 63 else v3
                samples.append((sample[2], sample[1]))
        series.append((labels, samples))
    return series

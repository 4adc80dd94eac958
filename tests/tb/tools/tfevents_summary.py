#!/usr/bin/python3
"""Independent summary of TensorBoard event files, for tests/tb expectations.

Uses only the standard library (struct), shares no code with trace/tensorboard.cpp:
TFRecord framing with masked CRC32C (bitwise, not table-driven), a minimal
protobuf wire-format walk of Event / Summary / Value / TensorProto, and per
series: count, first/last step and value, min/max step. Run it when the test
data changes and copy the numbers into tests/tb/tensorboard_test.cpp:

    /usr/bin/python3 tests/tb/tools/tfevents_summary.py tests/tb/data/lightning_lstm_textgen
"""
import os
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, i):
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return result, i


def fields(buf):
    """Yields (field number, wire type, value) of one message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 1:
            v = buf[i:i + 8]
            i += 8
        elif wt == 2:
            n, i = varint(buf, i)
            v = buf[i:i + n]
            i += n
        elif wt == 5:
            v = buf[i:i + 4]
            i += 4
        else:
            raise ValueError("wire type %d" % wt)
        yield num, wt, v


def records(path):
    with open(path, "rb") as f:
        data = f.read()
    i = 0
    while i < len(data):
        (n,) = struct.unpack_from("<Q", data, i)
        (lcrc,) = struct.unpack_from("<I", data, i + 8)
        assert masked(crc32c(data[i:i + 8])) == lcrc, "length crc at %d" % i
        body = data[i + 12:i + 12 + n]
        (dcrc,) = struct.unpack_from("<I", data, i + 12 + n)
        assert masked(crc32c(body)) == dcrc, "data crc at %d" % i
        yield i, body
        i += 12 + n + 4


def to_int64(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def scalar_of_tensor(t):
    dtype, dims, content, vals = 0, [], b"", []
    for num, wt, v in fields(t):
        if num == 1:
            dtype = v
        elif num == 2:
            dims = [d for n, _, d in fields(v) if n == 2]
        elif num == 4:
            content = v
        elif num in (5, 6, 7, 10, 13):
            vals.append((num, wt, v))
    sizes = []
    for d in dims:
        sizes += [s for n, _, s in fields(d) if n == 1]
    count = 1
    for s in sizes:
        count *= s
    if count != 1:
        return None
    fmt = {1: "<f", 2: "<d", 3: "<i", 9: "<q", 19: "<e"}.get(dtype)
    if fmt is None:
        return None
    if content:
        return float(struct.unpack(fmt, content[:struct.calcsize(fmt)])[0])
    for num, wt, v in vals:
        if num == 5:
            return float(struct.unpack("<f", v[:4])[0])
        if num == 6:
            return float(struct.unpack("<d", v[:8])[0])
        if num in (7, 10):
            if wt == 2:
                v, _ = varint(v, 0)
            return float(to_int64(v))
        if num == 13:
            if wt == 2:
                v, _ = varint(v, 0)
            return float(struct.unpack("<e", struct.pack("<H", v & 0xFFFF))[0])
    return None


def main():
    root = sys.argv[1]
    paths = []
    if os.path.isdir(root):
        for d, _, names in os.walk(root):
            paths += [os.path.join(d, n) for n in names if "tfevents" in n]
    else:
        paths = [root]
    series = {}
    n_records = n_events = 0
    for path in sorted(paths):
        for offset, body in records(path):
            n_records += 1
            step, wall, scalars = 0, float("nan"), []
            for num, wt, v in fields(body):
                if num == 1:
                    (wall,) = struct.unpack("<d", v)
                elif num == 2:
                    step = to_int64(v)
                elif num == 5:
                    for vn, _, value in fields(v):
                        if vn != 1:
                            continue
                        tag, x = None, None
                        for n, _, f in fields(value):
                            if n == 1:
                                tag = f.decode()
                            elif n == 2:
                                (x,) = struct.unpack("<f", f)
                            elif n == 8:
                                x = scalar_of_tensor(f)
                        if tag is not None and x is not None:
                            scalars.append((tag, x))
            if scalars:
                n_events += 1
            for tag, x in scalars:
                s = series.setdefault(tag, [])
                s.append((step, wall, x))
        print("file %s: %d bytes" % (path, os.path.getsize(path)))
    print("records %d, events with scalars %d" % (n_records, n_events))
    for tag in sorted(series):
        s = series[tag]
        print("%s: count %d, first step %d value %r time %r, last step %d value %r time %r, "
              "min step %d, max step %d" % (tag, len(s), s[0][0], s[0][2], s[0][1], s[-1][0],
                                            s[-1][2], s[-1][1], min(p[0] for p in s),
                                            max(p[0] for p in s)))


if __name__ == "__main__":
    main()

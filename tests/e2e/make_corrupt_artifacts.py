#!/usr/bin/python3
"""Writes damaged copies of a valid .tsr artifact, one file per case, into OUT_DIR and lists them in
OUT_DIR/cases.txt as "NAME EXPECT" lines (EXPECT: a word the error message must contain, or '-').

    make_corrupt_artifacts.py GOOD.tsr OUT_DIR [--flips N] [--seed S]

Cases: truncation at every section boundary (and one byte either side), N seeded random byte flips spread over the
whole file, a wrong magic, an unknown format version, a section offset past the end of the file, and a size whose
offset + size wraps around 2^64. The layout is read from the file itself (docs/artifact.md)."""
import argparse
import os
import random
import struct


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("good")
    ap.add_argument("out")
    ap.add_argument("--flips", type=int, default=150)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    data = open(a.good, "rb").read()
    os.makedirs(a.out, exist_ok=True)
    cases = []

    def emit(name, blob, expect="-"):
        with open(os.path.join(a.out, name + ".tsr"), "wb") as f:
            f.write(blob)
        cases.append((name, expect))

    count, = struct.unpack_from("<I", data, 12)
    table_off, = struct.unpack_from("<Q", data, 24)
    sections = []
    for i in range(count):
        kind, align, off, size, crc, _ = struct.unpack_from("<IIQQII", data, table_off + 32 * i)
        sections.append((i, off, size))

    # Truncation at every boundary: header, table, and each section's start and end, +-1 byte.
    cuts = {0, 1, 8, 63, 64, table_off + 32 * count - 1, table_off + 32 * count}
    for _, off, size in sections:
        for c in (off - 1, off, off + 1, off + size - 1, off + size):
            cuts.add(c)
    for c in sorted(cuts):
        if 0 <= c < len(data):
            emit("truncated_at_%d" % c, data[:c])

    # Random single-byte flips anywhere (each one must be caught by a checksum or a zero-padding check).
    rng = random.Random(a.seed)
    for k in range(a.flips):
        pos = rng.randrange(len(data))
        b = bytearray(data)
        b[pos] ^= 1 << rng.randrange(8)
        emit("flip_%03d_at_%d" % (k, pos), bytes(b))

    b = bytearray(data)
    b[0:8] = b"NOTATSR!"
    emit("wrong_magic", bytes(b), "magic")

    b = bytearray(data)
    struct.pack_into("<I", b, 8, 2)
    emit("unknown_version", bytes(b), "version")

    # An offset past the end and a wrapping size, in the last section's table entry.
    last = table_off + 32 * (count - 1)
    b = bytearray(data)
    struct.pack_into("<Q", b, last + 8, len(data) + 4096)
    emit("offset_past_end", bytes(b))
    b = bytearray(data)
    struct.pack_into("<Q", b, last + 16, (1 << 64) - 16)
    emit("size_wraps", bytes(b))

    emit("empty", b"")
    with open(os.path.join(a.out, "cases.txt"), "w") as f:
        for name, expect in cases:
            f.write("%s %s\n" % (name, expect))


if __name__ == "__main__":
    main()

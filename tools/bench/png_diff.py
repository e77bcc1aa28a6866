#!/usr/bin/env python3
"""How far two folders of dpinfer PNGs differ, image by image: the largest difference of one
value (levels of 255) and the share of values that are identical, over the PNGs both hold.

    png_diff.py DIR_A DIR_B        prints: images max_abs_diff percent_identical

Standard library only (zlib), for the 8-bit RGB, non-interlaced PNGs dpinfer writes; so it runs
with the system python3, without the fixtures venv.
"""
import os
import struct
import sys
import zlib


def read_png(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise SystemExit(f"{path}: not a PNG")
    pos, idat, width, height = 8, [], 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if (depth, colour, interlace) != (8, 2, 0):
                raise SystemExit(f"{path}: expected 8-bit RGB without interlacing")
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + length
    raw, stride = zlib.decompress(b"".join(idat)), width * 3
    out, previous = bytearray(), bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - 3] if i >= 3 else 0
            up, up_left = previous[i], previous[i - 3] if i >= 3 else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else up_left)) & 0xFF
        out += line
        previous = line
    return bytes(out)


def main():
    a, b = sys.argv[1:3]
    names = sorted(n for n in os.listdir(a) if n.endswith(".png") and os.path.exists(os.path.join(b, n)))
    if not names:
        raise SystemExit(f"no PNG is in both {a} and {b}")
    worst, same, total = 0, 0, 0
    for n in names:
        x, y = read_png(os.path.join(a, n)), read_png(os.path.join(b, n))
        if len(x) != len(y):
            raise SystemExit(f"{n}: the two images differ in size")
        worst = max(worst, max(abs(p - q) for p, q in zip(x, y)))
        same += sum(p == q for p, q in zip(x, y))
        total += len(x)
    print(f"{len(names)} {worst} {100.0 * same / total:.2f}")


if __name__ == "__main__":
    main()

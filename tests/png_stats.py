#!/usr/bin/env python3
"""png_stats.py FILE.png — prints "WIDTH HEIGHT DISTINCT_COLOURS STDDEV NONWHITE_FRACTION" of an 8-bit RGB/RGBA
PNG (the standard library only: zlib and the five PNG row filters), for the rendering tests."""
import struct, sys, zlib


def read_png(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6), "only 8-bit RGB/RGBA"
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride, prev, rows, i = zlib.decompress(idat), w * bpp, bytearray(w * bpp), [], 0
    for _ in range(h):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1: line[x] = (line[x] + a) & 255
            elif f == 2: line[x] = (line[x] + b) & 255
            elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, bpp, rows


w, h, bpp, rows = read_png(sys.argv[1])
colours, n, s, s2, nonwhite = set(), 0, 0.0, 0.0, 0
for r in rows[::2]:
    for x in range(0, w * bpp, bpp * 2):
        px = tuple(r[x:x + 3])
        colours.add(px)
        v = sum(px) / 3
        n += 1; s += v; s2 += v * v
        nonwhite += px != (255, 255, 255)
sd = max(s2 / n - (s / n) ** 2, 0) ** 0.5
print(w, h, len(colours), round(sd, 2), round(nonwhite / n, 4))

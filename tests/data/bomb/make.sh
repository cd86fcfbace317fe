#!/bin/sh
# Makes strings.summary: a perftracker summary of 8 KB whose body declares 2^28 strings (256 MiB
# of zeros once inflated), the decompression bomb of issue 14. Needs the zstd command; the file
# is committed, so the tests do not run this.
set -e
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 - "$tmp/body" <<'PY'
import sys
n = 1 << 28
def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7f) | 0x80); v >>= 7
    out.append(v)
    return bytes(out)
with open(sys.argv[1], "wb") as f:
    f.write(varint(n))
    chunk = bytes(1 << 20)
    for _ in range(n >> 20):
        f.write(chunk)
with open(sys.argv[1] + ".head", "wb") as f:
    f.write(b"PTSUMMRY" + bytes([3, 0, 0, 0]) + varint(len(varint(n)) + n))
PY
zstd -q -19 --long=27 -o "$tmp/body.zst" "$tmp/body" 2>/dev/null || zstd -q -19 -o "$tmp/body.zst" "$tmp/body"
cat "$tmp/body.head" "$tmp/body.zst" > "$(dirname "$0")/strings.summary"

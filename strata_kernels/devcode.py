"""The device-code container of a cuda12 plugin's translation unit (build time; `python -m strata_kernels.devcode`).

The cuda12 family is built without nvcc, so without `fatbinary`: each kernel source's SASS (a cubin from ptxas) and,
for a target whose table asks for it, its PTX are packed into this small container, which clang embeds in the host
object and the plugin's driver layer (templates/cuda/driver_api.cpp.j2) reads: b"STRATADC", the entry count (u32),
per entry (kind u32: 1 cubin, 2 PTX; sm number u32; size u64), then the entries' bytes in that order. PTX is stored
NUL-terminated, as cuModuleLoadData wants it.
"""
from __future__ import annotations

import struct
import sys
from pathlib import Path

MAGIC = b"STRATADC"
CUBIN, PTX = 1, 2


def compact_ptx(ptx: bytes) -> bytes:
    """PTX without its comment lines and indentation (the container is not compressed, as nvcc's fatbins are; PTX
    is whitespace-insensitive, and this takes ~16% off it)."""
    lines = (line.strip() for line in ptx.rstrip(b"\0").split(b"\n"))
    return b"\n".join(line for line in lines if line and not line.startswith(b"//")) + b"\n"


def pack(entries: list[tuple[int, int, bytes]]) -> bytes:
    """(kind, sm, bytes) entries -> the container."""
    head = MAGIC + struct.pack("<I", len(entries))
    body = b""
    for kind, sm, data in entries:
        if kind == PTX:
            data = compact_ptx(data) + b"\0"
        head += struct.pack("<IIQ", kind, sm, len(data))
        body += data
    return head + body


def unpack(blob: bytes) -> list[tuple[int, int, bytes]]:
    """The container's entries; raises ValueError for anything else."""
    if blob[:8] != MAGIC:
        raise ValueError("not a strata device-code container")
    n, = struct.unpack_from("<I", blob, 8)
    out, data = [], 12 + 16 * n
    for i in range(n):
        kind, sm, size = struct.unpack_from("<IIQ", blob, 12 + 16 * i)
        out.append((kind, sm, blob[data:data + size]))
        data += size
    return out


def main(argv: list[str]) -> int:
    """devcode OUT SM CUBIN [PTX]"""
    if len(argv) not in (3, 4):
        print("usage: python -m strata_kernels.devcode OUT SM CUBIN [PTX]", file=sys.stderr)
        return 2
    out, sm, cubin = Path(argv[0]), int(argv[1]), Path(argv[2])
    entries = [(CUBIN, sm, cubin.read_bytes())]
    if len(argv) == 4:
        entries.append((PTX, sm, Path(argv[3]).read_bytes()))
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(pack(entries))
    tmp.replace(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

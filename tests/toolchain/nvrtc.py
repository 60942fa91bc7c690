"""A small ctypes driver for NVRTC (the runtime compiler; `nvidia-cuda-nvrtc-cu12` from PyPI): compiles device code
to a cubin (real SASS) for archs the installed nvcc cannot build (sm_70 with CUDA 13)."""
from __future__ import annotations

import ctypes
import glob
import os


def find_libnvrtc(major: str = "12") -> str | None:
    cands = []
    try:
        import nvidia.cuda_nvrtc as m  # type: ignore
        for p in m.__path__:
            cands += sorted(glob.glob(os.path.join(p, "lib", f"libnvrtc.so.{major}*")))
    except ImportError:
        pass
    for d in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        if d:
            cands += sorted(glob.glob(os.path.join(d, f"libnvrtc.so.{major}*")))
    return cands[0] if cands else None


class Nvrtc:
    def __init__(self, path: str):
        self.lib = ctypes.CDLL(path)
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        self.version = f"{major.value}.{minor.value}"

    def compile(self, source: str, name: str, options: list[str], headers: dict[str, str]) -> tuple[bool, str, bytes]:
        """(ok, log, cubin). `headers` are in-memory includes (name -> text)."""
        lib = self.lib
        prog = ctypes.c_void_p()
        hn = (ctypes.c_char_p * len(headers))(*[k.encode() for k in headers])
        hs = (ctypes.c_char_p * len(headers))(*[v.encode() for v in headers.values()])
        rc = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), len(headers), hs, hn)
        if rc:
            return False, lib.nvrtcGetErrorString(rc).decode(), b""
        opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        rc = lib.nvrtcCompileProgram(prog, len(options), opts)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, buf)
        log = buf.value.decode(errors="replace")
        cubin = b""
        if rc == 0:
            lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
            cb = ctypes.create_string_buffer(size.value)
            if lib.nvrtcGetCUBIN(prog, cb) == 0:
                cubin = cb.raw[: size.value]
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
        return rc == 0 and bool(cubin), log, cubin


def cubin_arch(cubin: bytes) -> int | None:
    """The SM number in a cubin's ELF header (e_flags low byte for the classic layout, or the newer field)."""
    if len(cubin) < 64 or cubin[:4] != b"\x7fELF":
        return None
    e_flags = int.from_bytes(cubin[48:52], "little")
    # CUDA ELF: EF_CUDA_SM in bits 0..7 (old ABI) or bits 8..15 (ABI version >= 8).
    old, new = e_flags & 0xFF, (e_flags >> 8) & 0xFF
    return new if new >= 50 else old

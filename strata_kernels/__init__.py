"""strata-kernels: the QSA sparse-attention kernels of the Strata engine, built ahead of time per target.

Importing the package is cheap: no framework, no plugin and no native module is loaded until the first call.
"""
from __future__ import annotations

__version__ = "0.1.0"

from .errors import PluginError, StrataError, TargetError, ToolchainError, Unsupported  # noqa: E402
from .ops import KVCache  # noqa: E402

__all__ = [
    "KVCache", "qsa_prompt_attn", "qsa_decode_attn", "which", "plan", "Plan", "check_errors", "explain", "reference",
    "testing",
    "Unsupported", "StrataError", "TargetError", "ToolchainError", "PluginError", "__version__",
]


def __getattr__(name: str):
    # Lazy: the calls pull in the resolver and the native loader only when first used.
    if name in ("qsa_prompt_attn", "qsa_decode_attn", "which"):
        from . import ops
        value = globals()[name] = getattr(ops, name)  # kept: later look-ups skip this function (hot path)
        return value
    if name in ("plan", "Plan", "check_errors"):
        from . import plans as _plans
        value = globals()[name] = getattr(_plans, name)
        return value
    if name == "explain":
        from .resolve import explain
        return explain
    if name in ("reference", "testing", "parity", "bench", "resolve", "targets", "codegen", "build"):
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'strata_kernels' has no attribute {name!r}")


def __dir__() -> list[str]:
    # The lazy names above are public too: dir() and tab completion list them without importing anything.
    return sorted(set(globals()) | set(__all__))

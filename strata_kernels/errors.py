"""The package's exception types. Every user-facing failure is one of these (or ValueError/TypeError for bad
arguments), with a sentence saying what was expected, what was found and what to do."""


class StrataError(RuntimeError):
    """Base class of the package's own runtime errors."""


class Unsupported(StrataError):
    """A variant, target or device cannot run this call; the message says why and what to do instead."""


class TargetError(StrataError, ValueError):
    """A backend table or a target list is invalid."""


class ToolchainError(StrataError):
    """A compiler or SDK that a requested target needs is missing or too old."""


class BuildError(StrataError):
    """Code generation or compilation failed."""


class PluginError(StrataError):
    """A plugin file could not be loaded (ABI version, manifest, dlopen)."""


class GeometryMissing(StrataError, ValueError):
    """No installed plugin for the device carries the call's (head_dim, G); the message names the command that
    builds one. ``available``: the (head_dim, G) pairs the device's plugins do carry."""

    def __init__(self, message: str, available: "list[tuple[int, int]] | None" = None):
        super().__init__(message)
        self.available = list(available or [])

"""Where strata-kernels keeps what it writes outside the installed package: the per-user plugin directory (plugins
that `strata-kernels build` compiles; the resolver searches it) and the build cache. Both build time and run time
read these, so they live here. Nothing is ever written into site-packages after `pip install`."""
from __future__ import annotations

import os
from pathlib import Path

from . import __version__


def data_home() -> Path:
    """``$XDG_DATA_HOME/strata-kernels`` (default ``~/.local/share/strata-kernels``)."""
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "strata-kernels"


def cache_home() -> Path:
    """``$XDG_CACHE_HOME/strata-kernels`` (default ``~/.cache/strata-kernels``): build directories."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "strata-kernels"


def user_plugin_dir() -> Path:
    """The per-user plugin directory of this version: plugins built for another version are never picked up."""
    return data_home() / f"plugins-{__version__}"

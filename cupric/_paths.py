"""Where cupric keeps per-user files: one root for every cache.

`$CUPRIC_CACHE_DIR`, else `$XDG_CACHE_HOME/cupric`, else `~/.cache/cupric`; compiled kernels
live under `kernels/`, generated library bindings under `bindings/`.
"""

from __future__ import annotations

import os
from pathlib import Path

from cupric import _config


def cache_root() -> Path:
    override = _config.CACHE_DIR.get()
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cupric"

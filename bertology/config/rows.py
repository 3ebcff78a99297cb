"""How an extension point's row names its code: a `"module:function"` string, imported only when
that code runs.

Every extension point is one frozen row in a torch-free table: a verb (config/verbs.py), a probe
analysis (config/analysis_settings.py), a prune experiment and a head score
(config/prune_settings.py), a model type (families.py). Help, usage, completion, the config
checks and the capability checks are derived from those rows, so they load no torch; the
pipelines import the code a row names when they run it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable


def load_function(spec: str) -> Callable:
    """`"package.module:function"` -> the function, its module imported now."""
    module, _, function = spec.partition(":")
    return getattr(importlib.import_module(module), function)

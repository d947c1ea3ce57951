"""``lazy_module``: a module whose code runs on the first use of one of its names, not when it is imported.

For the parts of the app that Django imports while it starts (the admin's ``admin.py`` modules are imported
by every process, a worker's and a management command's included) but that only a request uses: those
processes then start without them (see docs/benchmarks.md, "Start-up")."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy_module(name: str) -> ModuleType:
    """The module ``name`` (absolute), imported lazily (``importlib.util.LazyLoader``): registered in
    ``sys.modules`` now, its code run when one of its attributes is first read. Already imported: itself."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(f"no module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module

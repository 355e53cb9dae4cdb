"""The former import paths of modules that moved, in one place.

``scrapy_scale.frontier.codec``, ``.status``, ``.cli_ops`` and ``.scheduler`` were
modules of a flat ``frontier`` folder, named in the docs and in projects' settings
(``SCHEDULER = "scrapy_scale.frontier.scheduler.Scheduler"``);
``scrapy_scale.config_check`` held the settings check a project may name in
``EXTENSIONS``; ``scrapy_scale.meta`` the Request.meta keys;
``scrapy_scale.frontier.backends.workers_read`` the workers table read back. Importing a former path
gives the module at its new path, the same object (not a copy), so the name still works.
Installed when ``scrapy_scale`` is imported.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

#: former path -> where the module lives now
MOVED = {
    "scrapy_scale.frontier.codec": "scrapy_scale.frontier.records.codec",
    "scrapy_scale.frontier.status": "scrapy_scale.frontier.ops.status",
    "scrapy_scale.frontier.cli_ops": "scrapy_scale.frontier.ops.cli_ops",
    "scrapy_scale.frontier.scheduler": "scrapy_scale.frontier.scheduling.scheduler",
    "scrapy_scale.config_check": "scrapy_scale.config.check",
    "scrapy_scale.meta": "scrapy_scale.meta_keys",
    "scrapy_scale.frontier.backends.workers_read": "scrapy_scale.frontier.records.workers_read",
}


class MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds a former path and loads it as the module at its new path."""

    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(MOVED[spec.name])
        # the import system sets __spec__ on what this returns: keep the module's own
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        own = self._specs.pop(module.__spec__.name if module.__spec__ else "", None)
        if own is not None:
            module.__spec__ = own


def install() -> None:
    """Put the finder on ``sys.meta_path`` once."""
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedFinder())

"""Every error the project raises derives from scrapy_scale.errors.ScaleError (one
``except ScaleError`` catches them all), and keeps its builtin base (ValueError, ...)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import scrapy_scale
from scrapy_scale.errors import ScaleError

pytestmark = pytest.mark.pure


def _project_exceptions() -> list[type[BaseException]]:
    found = []
    for info in pkgutil.walk_packages(scrapy_scale.__path__, "scrapy_scale."):
        try:
            mod = importlib.import_module(info.name)
        except ImportError:  # an optional extra that is not installed
            continue
        for _, obj in inspect.getmembers(mod, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__ == info.name and not obj.__name__.startswith("_"):
                found.append(obj)
    return found


def test_every_project_error_is_a_scale_error() -> None:
    errors = _project_exceptions()
    assert len(errors) >= 8, errors
    assert [e for e in errors if not issubclass(e, ScaleError)] == []


def test_builtin_bases_are_kept() -> None:
    from scrapy_scale.config import ScaleSettingError
    from scrapy_scale.frontier.store import FrontierError

    assert issubclass(ScaleSettingError, ValueError) and issubclass(FrontierError, RuntimeError)

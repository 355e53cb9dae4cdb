"""The settings check's former path, kept so that ``EXTENSIONS`` naming
``scrapy_scale.config_check.SettingsCheck`` keeps working; it lives in
:mod:`scrapy_scale.config.check`."""

from scrapy_scale.config.check import SettingsCheck

__all__ = ["SettingsCheck"]

"""An extension that validates every SCALE_* setting when the crawler starts.

The add-on enables it; a project that picks single components can add it to
EXTENSIONS to get the same startup check.
"""

from __future__ import annotations

from scrapy.crawler import Crawler

from scrapy_scale import config, startup


class SettingsCheck:
    def __init__(self, values: dict[str, object]):
        self.values = values

    @classmethod
    @startup.reports_setting_errors
    def from_crawler(cls, crawler: Crawler) -> SettingsCheck:
        return cls(config.validate_all(crawler.settings))

"""A bad setting stops `scrapy crawl` with one clear ERROR line: the setting, its value
(secrets redacted) and what is wrong; exit status 1 (README); no traceback at any log
level. Real `scrapy crawl` subprocesses (tests/support/crawling.py), settings given
with -s as a user types them; the lines of the add-on's value checks are checked in this
process, on a Crawler created with the add-on (as the crawl creates it)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from scrapy.utils.test import get_crawler

from scrapy_scale.config import ScaleSettingError

pytestmark = pytest.mark.pure


#: found by the add-on's check of the values when the crawler is created, so checked in
#: this process (a Crawler built as `scrapy crawl` builds it, the add-on on)
ADDON_CHECKED = [
    # a frontier setting
    ("SCALE_FRONTIER_BATCH=abc", "Cannot start: bad setting SCALE_FRONTIER_BATCH = 'abc': expected an integer"),
    # a store setting, with a password in it
    (
        "SCALE_STORE_URL=mysql://crawler:hunter2@db.internal/items",
        "Cannot start: bad setting SCALE_STORE_URL = 'mysql://***@db.internal/items': unknown URL scheme 'mysql';"
        " supported: sqlite://, mongodb://, mongodb+srv://",
    ),
    # an outcomes setting
    (
        'SCALE_RETRY_POLICY={"transient": {"retries": -1}}',
        'Cannot start: bad setting SCALE_RETRY_POLICY = \'{"transient": {"retries": -1}}\': '
        "transient.retries: expected an integer >= 0",
    ),
    # an unknown SCALE_ name (a typo), with a password in its value
    (
        "SCALE_FRONTEIR_URL=redis://:hunter2@127.0.0.1:6379/0",
        "Cannot start: bad setting SCALE_FRONTEIR_URL = 'redis://***@127.0.0.1:6379/0': unknown setting;"
        " did you mean SCALE_FRONTIER_URL?",
    ),
]


@pytest.mark.parametrize("setting,first_error", ADDON_CHECKED)
def test_a_bad_setting_is_one_error_line_when_the_crawler_is_created(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, setting: str, first_error: str
) -> None:
    name, _, value = setting.partition("=")
    caplog.set_level(logging.INFO)
    with pytest.raises(ScaleSettingError):
        get_crawler(settings_dict={"ADDONS": {"scrapy_scale.Addon": 0}, "SCALE_STATE_DIR": str(tmp_path), name: value})
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [(r.name, r.getMessage()) for r in errors] == [("scrapy_scale", first_error)]
    assert all(r.exc_info is None for r in errors), "the line comes without a traceback"
    assert "hunter2" not in caplog.text

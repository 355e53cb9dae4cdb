"""Settings checked at startup (each bad value stops the crawl naming the setting, never its password), and a
child request that copied its parent's meta starting a chain of its own on the frontier."""

from __future__ import annotations

import pytest

from scrapy_scale import config

pytestmark = pytest.mark.pure


def test_a_bad_url_setting_names_the_setting_but_not_its_password():
    """A typo in a store URL must not print the database password into the log."""
    config.load_declarations()
    settings = {"SCALE_STORE_URL": "mongo://app:s3cret@db.example:27017/shop"}
    with pytest.raises(config.ScaleSettingError) as e:
        config.validate_all(settings)
    msg = str(e.value)
    assert msg.startswith("SCALE_STORE_URL: ")
    assert "unknown URL scheme" in msg
    assert "s3cret" not in msg and "app:" not in msg
    assert "db.example:27017" in msg  # still says which URL was meant


def test_a_bad_url_setting_masks_a_password_in_the_query():
    config.load_declarations()
    with pytest.raises(config.ScaleSettingError) as e:
        config.get({"SCALE_FRONTIER_URL": "redis+x://127.0.0.1:6379/0?password=s3cret"}, "SCALE_FRONTIER_URL")
    assert "s3cret" not in str(e.value)


def test_an_outcome_log_that_cannot_be_opened_names_the_setting(tmp_path):
    """Every SCALE_* problem stops the crawl with the setting's name, a bad path too
    (it was a bare FileNotFoundError from the extension)."""
    from scrapy.utils.test import get_crawler

    from scrapy_scale.outcomes.record import OutcomeLog

    crawler = get_crawler(settings_dict={"SCALE_OUTCOME_LOG": str(tmp_path / "no" / "such" / "dir" / "o.jsonl")})
    with pytest.raises(config.ScaleSettingError) as e:
        OutcomeLog.from_crawler(crawler)
    assert e.value.setting == "SCALE_OUTCOME_LOG"
    assert "o.jsonl" in str(e.value)


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///"])
def test_a_store_url_without_a_file_fails_at_startup_with_the_setting_name(url):
    """It was a bare ValueError from open_spider, after the crawl had started."""
    config.load_declarations()
    with pytest.raises(config.ScaleSettingError) as e:
        config.validate_all({"SCALE_STORE_URL": url})
    assert e.value.setting == "SCALE_STORE_URL"
    assert "no file" in str(e.value)


@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_worker_id_fails_at_startup(value):
    """`-s SCALE_FRONTIER_WORKER=$UNSET_VAR` gave every such worker the id "": they took
    each other's leases back as their own. An id must say something."""
    config.load_declarations()
    with pytest.raises(config.ScaleSettingError) as e:
        config.validate_all({"SCALE_FRONTIER_WORKER": value})
    assert e.value.setting == "SCALE_FRONTIER_WORKER"


@pytest.mark.parametrize("collection,dead", [("items", "items"), ("products", "products")])
def test_a_dead_letter_that_is_the_item_collection_fails_at_startup(collection, dead):
    """Dead letters written into the items table (another schema) can never be stored: the
    writer retried that batch forever and the crawl stalled. Both names are settings, so the
    clash is a bad setting, named at startup."""
    from scrapy.utils.test import get_crawler

    from scrapy_scale.storage.pipeline import StorePipeline

    crawler = get_crawler(settings_dict={"SCALE_STORE_COLLECTION": collection, "SCALE_STORE_DEAD_LETTER": dead})
    with pytest.raises(config.ScaleSettingError) as e:
        StorePipeline.from_crawler(crawler)
    assert e.value.setting == "SCALE_STORE_DEAD_LETTER"
    assert collection in str(e.value)

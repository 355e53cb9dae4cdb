"""The run summary (scrapy_scale.monitor.summary) at the end of real `scrapy crawl` runs."""

from __future__ import annotations

import pytest

from scrapy_scale.monitor.summary import RunFacts, redact_url, render

pytestmark = pytest.mark.pure


def test_stopped_run_with_work_left_says_how_to_resume() -> None:
    lines = render(
        {"downloader/response_count": 10, "item_scraped_count": 4, "log_count/ERROR": 2},
        RunFacts(
            job="j",
            reason="shutdown",
            duration=75,
            store_url="sqlite:///x",
            frontier={"done": 4, "failed": 0, "pending": 6, "delayed": 0, "leased": 2},
        ),
    )
    text = "\n".join(lines)
    assert lines[0] == "scrapy-scale summary: job 'j' stopped early (shutdown) in 1 min 15 s"
    assert "4 done, 0 failed, 6 pending, 2 leased" in text and "delayed" not in text
    assert "again resumes the unfinished requests" in text
    assert "2 ERROR lines" in text


def test_store_urls_lose_their_credentials() -> None:
    assert (
        redact_url("mongodb://app:s3cret@db1:27017/shop?authSource=admin")
        == "mongodb://***@db1:27017/shop?authSource=admin"
    )
    assert redact_url("redis://:pw@127.0.0.1:6379/0") == "redis://***@127.0.0.1:6379/0"
    assert redact_url("mongodb://db/x?password=hunter2&w=1") == "mongodb://db/x?password=***&w=1"
    assert redact_url("sqlite:////abs/items.sqlite") == "sqlite:////abs/items.sqlite"
    assert redact_url("sqlite:///rel/items.sqlite") == "sqlite:///rel/items.sqlite"


def test_summary_shows_frontier_dead_letters_and_the_exit_status() -> None:
    # before: 8 records dead-lettered and the summary said "530 done, 0 failed, 0 pending"
    facts = RunFacts(
        job="j",
        reason="finished",
        duration=10.0,
        frontier={"done": 530, "failed": 0, "pending": 0},
        frontier_dead=8,
        exit_status=(3, "the run has 8 dead letters (SCALE_EXIT_CODE_DEAD_LETTERS)"),
    )
    lines = render({"scale/store/dead_lettered": 2}, facts)
    assert (
        "  dead letters  8 frontier records could not be read and were not crawled; 2 items could not be "
        "stored" in lines
    )
    assert lines[-1] == "  exit status   3: the run has 8 dead letters (SCALE_EXIT_CODE_DEAD_LETTERS)"


def test_summary_counts_the_requests_kept_in_memory_by_type() -> None:
    lines = render(
        {
            "scale/frontier/unserializable": 7,
            "scale/frontier/unserializable/Opaque": 5,
            "scale/frontier/unserializable/refused": 2,
        },
        RunFacts(job="j", reason="finished", duration=3, frontier={"done": 7}),
    )
    (line,) = [x for x in lines if "not stored" in x]
    assert "7 requests kept in memory only" in line and "Opaque 5, refused 2" in line, line


def test_a_request_whose_item_was_dead_lettered_counts_as_parse_failed_either_order() -> None:
    """Item 22: the frontier fails such a request (parse_failed); the summary's requests
    line said ok. The item's verdict can come after the outcome, or before it."""
    from types import SimpleNamespace

    from scrapy.http import Request

    from scrapy_scale import meta_keys
    from scrapy_scale.errors import ItemDeadLettered
    from scrapy_scale.monitor.summary import OutcomeTally
    from scrapy_scale.outcomes.model import FailureClass, Outcome

    def response(fp: str) -> SimpleNamespace:
        return SimpleNamespace(request=Request("http://a.test/", meta={meta_keys.FINGERPRINT: fp}))

    tally = OutcomeTally(lambda request: request.meta[meta_keys.FINGERPRINT])
    dead = ItemDeadLettered("too large")
    ok = FailureClass.OK
    # after: two items, the second dead-lettered once the outcome was counted
    tally.on_outcome(Outcome("a", "http://a.test/a", "a.test", ok, items=2))
    tally.on_item({}, response("a"))
    assert tally.ordered(tally.outcomes) == {"ok": 1}
    tally.on_item({}, response("a"), exception=dead)
    assert tally.ordered(tally.outcomes) == {"parse_failed": 1}
    # before: the dead letter (as item_error's failure) comes before the outcome
    from twisted.python.failure import Failure

    tally.on_item({}, response("b"), failure=Failure(dead))
    tally.on_outcome(Outcome("b", "http://a.test/b", "a.test", ok, items=1))
    # a request whose items were all stored stays ok; nothing is left followed
    tally.on_outcome(Outcome("c", "http://a.test/c", "a.test", ok, items=1))
    tally.on_item({}, response("c"))
    assert tally.ordered(tally.outcomes) == {"ok": 1, "parse_failed": 2}
    assert not tally.followed


def test_under_scrapyd_the_summary_says_a_new_scrapyd_job_resumes_and_names_the_state_folder(
    tmp_path, monkeypatch
) -> None:
    """Issue 31: under scrapyd the summary said `the same scrapy crawl again resumes`, and its
    status command had no folder, so run from the project it found another job's frontier."""
    import os

    from scrapy import Spider
    from scrapy.utils.test import get_crawler

    from scrapy_scale.monitor.summary import resume_how, status_command

    monkeypatch.setenv("SCRAPY_PROJECT", "shop")
    monkeypatch.chdir(tmp_path)  # scrapyd's working folder: the relative .scale is under it
    crawler = get_crawler(Spider, {})
    crawler.spider = Spider("catalog", _job="6487ec79947edab326d6db28a2cad2e2")
    how = resume_how(crawler, "catalog")
    assert how == "a new scrapyd job of spider catalog (schedule.json -d project=shop -d spider=catalog)"
    assert resume_how(crawler, "catalog-de") == how.replace(
        "spider=catalog)", "spider=catalog -d setting=SCALE_JOB=catalog-de)"
    )
    cmd = status_command(crawler, "catalog")
    assert cmd == f"scrapy scale status catalog -s SCALE_STATE_DIR={os.path.join(str(tmp_path), '.scale')}"
    text = "\n".join(
        render({}, RunFacts(job="catalog", reason="shutdown", duration=1, frontier={"pending": 3}, resume_how=how))
    )
    assert f"{how} resumes the unfinished requests" in text and "scrapy crawl" not in text

    plain = get_crawler(Spider, {})
    plain.spider = Spider("catalog")  # not scrapyd: as before
    assert resume_how(plain, "catalog") is None and status_command(plain, "catalog") == "scrapy scale status catalog"


def test_each_class_line_reads_as_a_label_and_its_meaning() -> None:
    """Issue 31: `egress_failed:the proxy failed` - the class name filled its column."""
    lines = render(
        {},
        RunFacts(job="j", reason="finished", duration=1, outcomes={"ok": 5, "egress_failed": 1, "not_found": 1}),
    )
    import re

    found = [m for line in lines if (m := re.search(r"\b(egress_failed|not_found):( *)(\S.*)$", line))]
    assert [m.group(1) for m in found] == ["not_found", "egress_failed"], lines
    assert all(m.group(2) for m in found), lines  # a space after the label
    assert len({m.start(3) for m in found}) == 1, lines  # the meanings start in one column

"""MongoDB credentials and rights, against a real server that requires authentication
(SecantusDB with --auth, SCRAM-SHA-256; users made with createUser). Before: a wrong password
made every batch fail with `store refused a batch ... authentication failed`, retried every
10 s forever. Now it stops the crawl at startup naming SCALE_STORE_URL; missing write rights
stop it at the first write (store_failed), both with exit status 1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from scrapy_scale.testbed import Testbed
from tests.support import services
from tests.support.crawling import run_crawl

pytestmark = pytest.mark.crawl

SECRET = "pw-s3cr3t-9x"


@pytest.fixture(scope="module")
def auth_mongo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    p = services.private_mongo_with_users(
        tmp_path_factory.mktemp("mongo-auth"),
        {
            "writer": (SECRET, [{"role": "readWrite", "db": "crawl"}]),
            "reader": (SECRET, [{"role": "read", "db": "crawl"}]),
        },
    )
    yield p.port
    p.kill()


def url(port: int, user: str, password: str) -> str:
    return f"mongodb://{user}:{password}@127.0.0.1:{port}/crawl?authSource=admin&serverSelectionTimeoutMS=3000"


@pytest.mark.timeout(240)
def test_wrong_mongodb_credentials_stop_the_crawl_at_startup(tmp_path: Path, auth_mongo: int) -> None:
    with Testbed(hosts=1, pages=5, seed=2) as tb:
        res = run_crawl(tb, {"SCALE_STORE_URL": url(auth_mongo, "writer", "wrong-" + SECRET)}, tmp_path, timeout=90)
    assert res.returncode == 1, res.tail()
    assert "SCALE_STORE_URL" in res.log and "refused the credentials (AuthenticationFailed)" in res.log, res.tail()
    assert "store refused a batch" not in res.log and "Crawled 0 pages" not in res.log.split("Cannot start")[-1]
    assert SECRET not in res.log  # the password never reaches the log


@pytest.mark.timeout(240)
def test_a_user_without_write_rights_stops_the_crawl_at_the_first_write(tmp_path: Path, auth_mongo: int) -> None:
    with Testbed(hosts=1, pages=5, seed=2) as tb:
        res = run_crawl(tb, {"SCALE_STORE_URL": url(auth_mongo, "reader", SECRET)}, tmp_path, timeout=90)
    assert res.returncode == 1, res.tail()
    assert "refused the rights (Unauthorized)" in res.log and "store_failed" in res.log, res.tail()
    assert SECRET not in res.log


@pytest.mark.timeout(240)
def test_the_right_credentials_store_every_item(tmp_path: Path, auth_mongo: int) -> None:
    import pymongo

    with Testbed(hosts=1, pages=5, seed=2) as tb:
        res = run_crawl(
            tb,
            {"SCALE_STORE_URL": url(auth_mongo, "writer", SECRET), "SCALE_STORE_COLLECTION": "ok_items"},
            tmp_path,
            timeout=90,
        )
        expected = len(tb.detail_urls())
    assert res.returncode == 0, res.tail()
    c: pymongo.MongoClient = pymongo.MongoClient(url(auth_mongo, "writer", SECRET))
    try:
        assert c.crawl.ok_items.count_documents({}) == expected
    finally:
        c.close()

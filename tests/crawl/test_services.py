"""The service fixtures themselves answer, and private servers survive kill and restart."""

import pymongo
import pytest
import redis

pytestmark = pytest.mark.crawl


def test_shared_redis_answers(redis_url, redis_prefix):
    r = redis.Redis.from_url(redis_url)
    r.set(f"{redis_prefix}:k", "v")
    assert r.get(f"{redis_prefix}:k") == b"v"


@pytest.mark.paced
def test_private_redis_keeps_acked_writes_across_kill(redis_server):
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    redis.Redis.from_url(url).set("k", "v")
    redis_server.restart()
    assert redis.Redis.from_url(url).get("k") == b"v"


def test_mongo_answers(mongo_uri):
    c = pymongo.MongoClient(mongo_uri, serverSelectionTimeoutMS=5000)
    coll = c["scaletest"]["fixture"]
    coll.replace_one({"_id": "a"}, {"_id": "a", "n": 1}, upsert=True)
    assert coll.find_one({"_id": "a"})["n"] == 1

"""One redaction function for every URL the project prints (scrapy_scale/redact.py): every
form of credentials, the `scrapy scale` commands against a Redis that wants a password,
and the outcome log of a crawl whose URLs carry `user:pass@`."""

from __future__ import annotations

import pytest

from scrapy_scale.redact import redact_text, redact_url

pytestmark = pytest.mark.pure

FORMS = [
    ("redis://user:s3cret@h:6379/0", "redis://***@h:6379/0"),
    ("redis://:s3cret@h:6379/0", "redis://***@h:6379/0"),
    ("redis://user@h:6379/0", "redis://***@h:6379/0"),
    ("redis://h:6379/0?password=s3cret", "redis://h:6379/0?password=***"),
    ("rediss://h:6379?username=u&password=s3cret&db=2", "rediss://h:6379?username=u&password=***&db=2"),
    ("redis://h:6379/0?password=", "redis://h:6379/0?password=***"),
    # an unencoded '#', '?' or '@' in a password: the authority runs to the first '/'
    ("redis://:s3#cret@h:6379/0", "redis://***@h:6379/0"),
    ("redis://u:s3?cr@et@h:6379/0", "redis://***@h:6379/0"),
    ("redis://u%40x:s3%3Acret@h/0", "redis://***@h/0"),
    (
        "mongodb+srv://app:s3cret@cluster0.ab.mongodb.net/shop?retryWrites=true&w=majority",
        "mongodb+srv://***@cluster0.ab.mongodb.net/shop?retryWrites=true&w=majority",
    ),
    (
        "mongodb+srv://cluster0.ab.mongodb.net/?authMechanism=MONGODB-AWS"
        "&authMechanismProperties=AWS_SESSION_TOKEN:s3cret",
        "mongodb+srv://cluster0.ab.mongodb.net/?authMechanism=MONGODB-AWS"
        "&authMechanismProperties=AWS_SESSION_TOKEN:***",
    ),
    (
        "mongodb://u:s3cret@h1:27017,h2:27017/db?replicaSet=rs&tlsCertificateKeyFilePassword=s3cret",
        "mongodb://***@h1:27017,h2:27017/db?replicaSet=rs&tlsCertificateKeyFilePassword=***",
    ),
    (
        "mongodb://h/db?authSource=admin&authMechanismProperties=SERVICE_NAME:mongodb",
        "mongodb://h/db?authSource=admin&authMechanismProperties=SERVICE_NAME:mongodb",
    ),
    ("http://u:s3cret@[::1]:80/x?a=1#frag", "http://***@[::1]:80/x?a=1#frag"),
    ("https://api.example/v1?api_key=s3cret&q=a%20b", "https://api.example/v1?api_key=***&q=a%20b"),
    # nothing to hide: kept byte for byte
    ("sqlite:////abs/frontier.db", "sqlite:////abs/frontier.db"),
    ("sqlite:///rel/items.sqlite", "sqlite:///rel/items.sqlite"),
    ("https://medium.com/@user/post?q=a+b&x=%2F", "https://medium.com/@user/post?q=a+b&x=%2F"),
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
]


@pytest.mark.parametrize("url,expected", FORMS)
def test_every_form_of_credentials_is_masked(url: str, expected: str) -> None:
    assert redact_url(url) == expected
    assert "s3" not in redact_url(url)


def test_urls_inside_a_message_are_masked() -> None:
    text = "cannot connect to redis://:s3cret@h:1/0 (then mongodb://a:s3cret@m/x?password=s3cret)"
    assert redact_text(text) == "cannot connect to redis://***@h:1/0 (then mongodb://***@m/x?password=***)"


def test_no_other_copy_of_the_redaction() -> None:
    """Every module that prints URLs calls scrapy_scale.redact; the old private copies are gone."""
    import scrapy_scale.frontier.backends.redis.store as redis_store
    import scrapy_scale.frontier.ops.cli_ops as cli_ops
    import scrapy_scale.storage.backends as backends

    assert not hasattr(redis_store, "_safe_url")
    assert not hasattr(cli_ops, "_safe_url")
    assert not hasattr(backends, "redact")

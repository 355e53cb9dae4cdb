"""The probe requests only the hosts it is given: a robots.txt redirect is followed on its
own host only (real HTTP servers on loopback)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from scrapy_scale.outcomes.classify import Classifier, SignatureBlockDetector
from scrapy_scale.probe.policy import Limits
from scrapy_scale.probe.run import run

pytestmark = pytest.mark.crawl

NAMES = {"site.test": "127.0.0.1", "other.test": "127.0.0.1"}


@contextmanager
def server(answers: dict[str, tuple[int, dict[str, str], bytes]]) -> Iterator[tuple[int, list[str]]]:
    """A loopback HTTP server answering ``answers`` by path (others: 200 "ok"); its port and
    the paths it was asked for."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            seen.append(self.path)
            status, headers, body = answers.get(self.path, (200, {}, b"ok"))
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1], seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def probe(port: int) -> str:
    lim = Limits(max_requests=50, max_time=5, min_seconds=0.2, min_answers=5)
    (site,) = run([f"http://site.test:{port}/item/1"], lim, Classifier([], [SignatureBlockDetector()]), names=NAMES)
    return site.skipped


def test_a_robots_redirect_to_another_host_is_not_followed() -> None:
    with server({}) as (other_port, other_seen):
        moved = (302, {"Location": f"http://other.test:{other_port}/robots.txt"}, b"")
        with server({"/robots.txt": moved}) as (port, seen):
            skipped = probe(port)
    assert skipped == "robots.txt redirects to another host (other.test): not probed"
    assert other_seen == [] and seen == ["/robots.txt"]  # the other host saw nothing, nor the site's URLs


def test_a_robots_redirect_on_the_same_host_is_followed() -> None:
    moved = (301, {"Location": "/real-robots.txt"}, b"")
    real = (200, {"Content-Type": "text/plain"}, b"User-agent: *\nDisallow: /item/\n")
    with server({"/robots.txt": moved, "/real-robots.txt": real}) as (port, seen):
        skipped = probe(port)
    assert skipped == "robots.txt disallows every URL given: not probed"
    assert seen == ["/robots.txt", "/real-robots.txt"]


def test_a_robots_redirect_loop_is_not_probed() -> None:
    with server({"/robots.txt": (302, {"Location": "/robots.txt"}, b"")}) as (port, seen):
        skipped = probe(port)
    assert skipped == "robots.txt redirects more than 5 times: not probed"
    assert seen == ["/robots.txt"] * 6

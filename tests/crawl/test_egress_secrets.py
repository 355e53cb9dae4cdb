"""An authenticated egress: the right credentials work (plain requests and CONNECT), wrong
ones are a 407 = egress_failed, and the password appears nowhere: log, stats, outcome
log, status, `scrapy scale egress`, the stored frontier and the pool's state."""

from __future__ import annotations

import base64
import json
from collections import Counter

import pytest

from scrapy_scale.testbed import ProxySpec, Testbed
from tests.crawl.test_commands import scale
from tests.crawl.test_egress_crawl import outcomes, settings
from tests.support.crawling import run_crawl

pytestmark = pytest.mark.crawl

PASSWORD, WRONG = "s3cretPW", "wr0ngPW"


def _forms(user: str, password: str) -> list[bytes]:
    """The password as it could leak: plain, in the Basic token, in a base64'd header value."""
    token = base64.b64encode(f"{user}:{password}".encode())
    return [password.encode(), token, base64.b64encode(b"Basic " + token)]


@pytest.mark.parametrize("tls", [False, True])
def test_credentials_work_fail_with_407_and_never_leak(tmp_path, tls):
    spec = ProxySpec("auth", mode="auth", user="alice", password=PASSWORD)
    with Testbed(hosts=2, pages=20, seed=4, tls=tls, proxies=[spec]) as tb:
        right = tb.proxy_url("auth")
        wrong = right.replace(PASSWORD, WRONG)
        s = settings(tb, tmp_path, SCALE_EGRESSES={"auth": [right, wrong]})
        res = run_crawl(tb, s, tmp_path, timeout=180)
        assert res.returncode == 0, res.tail()
        expected = tb.detail_urls()
        served = list(tb.log)
        proxy_events = Counter((e.method == "CONNECT", e.outcome) for e in tb.proxy_log)
    assert {i["url"] for i in res.items} == expected
    assert served and all(r.egress == "auth" for r in served)
    if tls:  # https goes through CONNECT tunnels, authenticated on the CONNECT
        assert proxy_events[(True, "tunnel")] > 0 and proxy_events[(False, "forwarded")] == 0
    else:
        assert proxy_events[(False, "forwarded")] > 0
    assert proxy_events[(tls, "auth_required")] >= 1  # the wrong credentials: 407
    # the pool's stats count every download, robots.txt included: the wrong egress may be
    # quarantined by its first three (robots.txt) failures before any page goes through it,
    # so the outcome log (pages only) need not name it
    by = "scale/egress/by/"
    egresses = {k[len(by) :].split("/")[0] for k in res.stats if k.startswith(by)}
    assert len(egresses) == 2 and all(e.startswith("127.0.0.1:") and "~" in e for e in egresses)
    (wrong_id,) = {k[len(by) :].split("/")[0] for k in res.stats if k.startswith(by) and k.endswith("/egress_failed")}
    assert res.stats[f"{by}{wrong_id}/failed/egress_failed"] >= 3
    outs = outcomes(tmp_path)
    assert {o["cls"] for o in outs if o["egress"] == wrong_id} <= {"egress_failed"}
    assert f"egress {wrong_id} quarantined" in res.log
    # what a user can look at afterwards
    where = {"SCALE_STATE_DIR": str(tmp_path / "state")}
    status = scale("status", "catalog", settings=where)
    status_json = scale("status", "catalog", "--json", settings=where)
    egress = scale("egress", "catalog", settings=where)
    egress_json = scale("egress", "catalog", "--json", settings=where)
    for p in (status, status_json, egress, egress_json):
        assert p.returncode == 0, p.stderr
    assert wrong_id in egress.stdout and "quarantined" in egress.stdout and wrong_id in status.stdout
    rows = {r["egress"]: r for r in json.loads(egress_json.stdout)}
    assert rows[wrong_id]["state"] == "quarantined" and rows[wrong_id]["failures"]["egress_failed"] >= 3
    texts = [res.log, json.dumps(res.stats), (tmp_path / "outcomes.jsonl").read_text()]
    texts += [p.stdout + p.stderr for p in (status, status_json, egress, egress_json)]
    blobs = [t.encode() for t in texts]
    files = [f for f in (tmp_path / "state").rglob("*") if f.is_file()]  # frontier, egress state, items (+ WAL)
    blobs += [f.read_bytes() for f in files]
    assert any(f.name.startswith("frontier.db") for f in files) and any(f.name == "egress.db" for f in files)
    for blob in blobs:
        for form in _forms("alice", PASSWORD) + _forms("alice", WRONG):
            assert form not in blob

"""`scrapy scale watch` and the numbers `scrapy scale status` adds: read from the backend
(the frontier's status and the snapshots the workers publish next to it) while a real
crawl runs, on SQLite and on Redis."""

from __future__ import annotations

from pathlib import Path

import pytest

from scrapy_scale.monitor import watch, worker_status
from scrapy_scale.monitor.progress import RateWindow

pytestmark = pytest.mark.pure


def doc(worker: str, until: float, **kw: object) -> dict[str, object]:
    d: dict[str, object] = {
        "worker": worker,
        "until": until,
        "requests": {"ok": 10, "blocked": 2},
        "retries": {"blocked": 4},
        "items_stored": 9,
        "items_dead_lettered": 1,
        "pages_per_min": 60.0,
        "items_per_min": 30.0,
        "finished_per_min": 60.0,
        "domains": {
            "a.test": {"attempts": 10, "blocked": 5, "rate_limited": 0},
            "b.test": {"attempts": 10, "blocked": 1, "rate_limited": 3},
        },
        "egress_pool": {"healthy": 3},
        "browser_contexts": 2,
        "download_slots": 2,
    }
    d.update(kw)
    return d


def test_merge_sums_the_workers_that_are_still_valid() -> None:
    docs = [doc("w1", 100), doc("w2", 100, egress_pool={"quarantined": 1}), doc("gone", 10)]
    m = worker_status.merge(worker_status.valid(docs, now=50))
    assert sorted(m["workers"]) == ["w1", "w2"]
    assert m["requests"] == {"ok": 20, "blocked": 4} and m["items_stored"] == 18
    assert m["pages_per_min"] == 120 and m["egress_pool"] == {"healthy": 3, "quarantined": 1}
    assert watch.top_domains(m, "blocked")[0] == ("a.test", 10, 20, 0.5)
    status = {"job": "j", "counts": {"pending": 120, "delayed": 0, "leased": 0, "done": 30, "failed": 2}}
    v = watch.view(status, docs, now=50)
    assert v["eta"] == pytest.approx(60)  # 120 left at the workers' 120 finished/min
    lines = watch.text_lines(v)
    assert lines[0] == "progress: 30 done, 2 failed, 120 pending; 120 pages/min, 60 items/min; ETA 1 min"
    assert any(line.startswith("top domains by block rate: a.test 50% (10/20)") for line in lines)
    assert any(line.startswith("top domains by rate limiting: b.test 30% (6/20)") for line in lines)
    assert "egress pool: healthy 3, quarantined 1" in lines


def test_the_job_rate_comes_from_the_frontier_between_refreshes() -> None:
    rate = RateWindow()
    rate.add(0.0, 0)
    rate.add(10.0, 50)
    st = {"counts": {"pending": 100, "done": 50}}
    v = watch.view(st, [], rate=None, now=0)
    assert v["eta"] is None  # nobody publishes, one frontier sample: no rate yet
    assert rate.rate() == 5 and watch.view(st, [], now=0)["merged"]["workers"] == []


def test_file_sink_round_trip(tmp_path: Path) -> None:
    sink = worker_status.FileSink(tmp_path / "monitor" / "job")
    sink.write("host/0", doc("host/0", 1))
    assert [d["worker"] for d in sink.read()] == ["host/0"]
    sink.remove("host/0")
    assert sink.read() == []


#: a snapshot file as the version before the typed record (monitor/snapshot.py) wrote it
OLD_SNAPSHOT = (
    '{"worker": "host/0", "job": "catalog", "host": "host", "pid": 4242, "at": 1000.0, "until": 1015.0, '
    '"started": 900.0, "requests": {"ok": 7, "blocked": 1}, "retries": {"blocked": 2}, "done": 7, '
    '"items_stored": 6, "items_dead_lettered": 0, "pages_per_min": 42.0, "items_per_min": 36.0, '
    '"finished_per_min": 42.0, "domains": {"a.test": {"attempts": 8, "blocked": 1, "rate_limited": 0}}, '
    '"egress_pool": {"healthy": 2}, "browser_contexts": 0, "download_slots": 1}'
)


def test_a_snapshot_in_the_previous_written_form_reads_back_the_same(tmp_path: Path) -> None:
    """The typed record changes no stored byte: a snapshot file written by the previous
    version decodes to the same fields (and encodes back to them), and the view sums it."""
    import json

    from scrapy_scale.monitor import snapshot

    old = json.loads(OLD_SNAPSHOT)
    assert snapshot.decode(OLD_SNAPSHOT, 1000.0) == old
    assert json.loads(snapshot.encode(snapshot.decode(OLD_SNAPSHOT, 1000.0))) == old
    folder = tmp_path / "monitor" / "catalog"
    folder.mkdir(parents=True)
    (folder / "host_0.json").write_text(OLD_SNAPSHOT)
    m = worker_status.merge(worker_status.valid(worker_status.FileSink(folder).read(), now=1000.0))
    assert m["workers"] == ["host/0"] and m["requests"] == old["requests"] and m["items_stored"] == 6
    assert m["pages_per_min"] == 42.0 and m["domains"] == {"a.test": old["domains"]["a.test"]}


def test_a_snapshot_with_a_field_of_the_wrong_type_is_skipped() -> None:
    """The one decoder refuses what a worker does not write (one warning per worker)."""
    from scrapy_scale.monitor import snapshot

    for bad in ({"items_stored": "many"}, {"domains": {"a.test": {"blocked": -1}}}, {"pages_per_min": "nan"}):
        with pytest.raises(snapshot.Refused):
            snapshot.decode(doc("w", 100, **bad), 50.0)
        assert worker_status.valid([doc("w", 100, **bad), doc("ok", 100)], 50.0)[0]["worker"] == "ok"

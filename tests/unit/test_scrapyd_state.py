"""Where the embedded state lives under scrapyd's ``jobs_dir``: one folder per spider,
not per scrapyd job id (so the next job of the spider resumes the frontier)."""

from __future__ import annotations

import os

import pytest
from scrapy.settings import Settings

from scrapy_scale.config import core_settings as settings_core

pytestmark = pytest.mark.pure


def test_scrapyd_jobdir_gives_the_spiders_folder() -> None:
    env = {"SCRAPY_PROJECT": "shop"}
    assert settings_core.scrapyd_job_folder("/var/jobs/shop/catalog/6487ec79", env) == "/var/jobs/shop/catalog"


@pytest.mark.parametrize(
    ("jobdir", "env"),
    [
        ("/var/jobs/shop/catalog/6487ec79", {}),  # not under scrapyd
        ("/var/jobs/other/catalog/6487ec79", {"SCRAPY_PROJECT": "shop"}),  # another project's shape
        ("crawls/run1", {"SCRAPY_PROJECT": "shop"}),  # a JOBDIR the user chose
        ("/", {"SCRAPY_PROJECT": "shop"}),
        ("", {"SCRAPY_PROJECT": ""}),
    ],
)
def test_other_jobdirs_are_left_alone(jobdir: str, env: dict[str, str]) -> None:
    assert settings_core.scrapyd_job_folder(jobdir, env) is None


def test_state_folder_and_files_follow_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRAPY_PROJECT", "shop")
    s = Settings({"JOBDIR": "/var/jobs/shop/catalog/6487ec79"})
    assert settings_core.state_folder(s) == "/var/jobs/shop/catalog"
    assert settings_core.state_file_url(s, "frontier.db") == "sqlite:////var/jobs/shop/catalog/frontier.db"
    monkeypatch.delenv("SCRAPY_PROJECT")
    assert settings_core.state_folder(s) == "/var/jobs/shop/catalog/6487ec79"  # plain JOBDIR: as before
    assert settings_core.state_folder(Settings({"SCALE_STATE_DIR": "st"})) == "st"
    assert os.path.isabs(settings_core.state_file_url(Settings(), "x.db")[len("sqlite:///") :])


def test_the_summarys_status_command_names_the_frontier_under_a_jobdir(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from scrapy_scale.monitor.summary import status_command

    monkeypatch.setenv("SCRAPY_PROJECT", "shop")
    crawler = SimpleNamespace(settings=Settings({"JOBDIR": "/var/jobs/shop/catalog/6487ec79"}))
    cmd = status_command(crawler, "catalog")  # type: ignore[arg-type]
    assert cmd == "scrapy scale status catalog -s SCALE_FRONTIER_URL=sqlite:////var/jobs/shop/catalog/frontier.db"
    crawler = SimpleNamespace(settings=Settings({"JOBDIR": "/j", "SCALE_FRONTIER_URL": "redis://r:6379/0"}))
    assert status_command(crawler, "catalog") == "scrapy scale status catalog -s SCALE_FRONTIER_URL=redis://r:6379/0"  # type: ignore[arg-type]

"""Settings shared by every component: the job and where state lives."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from scrapy_scale.config import as_bool, as_int, as_str, declare

#: what a job name may be: it is part of Redis keys and SCAN patterns, file and table names
JOB_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
JOB_NAME_RULE = "1 to 100 letters, digits, '.', '_' or '-', starting with a letter or digit"


def job_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a job name, or None when it can."""
    if JOB_NAME_RE.fullmatch(name):
        return None
    return f"job name {name!r} is not allowed: use {JOB_NAME_RULE}"


def as_job_name(v: object) -> str:
    name = as_str(v)
    problem = job_name_problem(name)
    if problem:
        raise ValueError(problem)
    return name


JOB = declare(
    "SCALE_JOB",
    None,
    as_job_name,
    "Name of the job whose state (frontier, items, history) this crawl uses. Default: the spider's name.",
    "core",
)
STATE_DIR = declare(
    "SCALE_STATE_DIR",
    ".scale",
    as_str,
    "Folder for the embedded SQLite files when no URL names one (`JOBDIR` wins when set; under scrapyd's "
    "`jobs_dir`, the spider's folder above the per-job `JOBDIR`).",
    "core",
)
ENABLED = declare(
    "SCALE_ENABLED",
    True,
    as_bool,
    "Master switch of the add-on: False leaves the crawl exactly as plain Scrapy would run it.",
    "core",
)
GC_FREEZE = declare(
    "SCALE_GC_FREEZE",
    True,
    as_bool,
    "Once the engine starts, collect once and freeze what is left (`gc.freeze()`), so no later "
    "garbage collection walks the start-up heap again (see docs/benchmarks.md); False leaves it.",
    "core",
)
GC_THRESHOLD = declare(
    "SCALE_GC_THRESHOLD",
    5000,
    as_int(0, 1_000_000),
    "Generation-0 threshold of the garbage collector during the crawl (Python's own is 700); 0 leaves Python's.",
    "core",
)
EXIT_CODE_DEAD_LETTERS = declare(
    "SCALE_EXIT_CODE_DEAD_LETTERS",
    3,
    as_int(0, 255),
    "Exit status of a crawl that ends with dead letters (frontier records or items that could not be "
    "read or stored); 0 = exit 0 as before.",
    "core",
)


def scrapyd_job_folder(jobdir: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The spider's folder when ``jobdir`` is scrapyd's per-job ``JOBDIR``, else None.

    scrapyd (with ``jobs_dir`` set) passes ``JOBDIR = jobs_dir/PROJECT/SPIDER/JOBID`` and
    ``SCRAPY_PROJECT = PROJECT`` in the environment: a new folder for every scrapyd job.
    The state of a scrapy-scale job must outlive a scrapyd job (the next job of the
    spider resumes it), so it lives one level up, in ``jobs_dir/PROJECT/SPIDER``.
    """
    env = os.environ if environ is None else environ
    project = env.get("SCRAPY_PROJECT")
    parts = os.path.normpath(os.path.abspath(jobdir)).split(os.sep)
    if project and len(parts) >= 4 and parts[-3] == project:
        return os.sep.join(parts[:-1])
    return None


def state_folder(settings: object) -> str:
    """Folder of the embedded state: ``JOBDIR`` (scrapyd's per-job ``JOBDIR`` minus its
    job id, see :func:`scrapyd_job_folder`), else ``SCALE_STATE_DIR``."""
    get = getattr(settings, "get", None)
    jobdir = get("JOBDIR") if get else None
    if jobdir:
        return scrapyd_job_folder(str(jobdir)) or str(jobdir)
    return STATE_DIR.get(settings)  # type: ignore[arg-type]


def state_file_url(settings: object, filename: str) -> str:
    """``sqlite:///`` URL of ``filename`` in :func:`state_folder`."""
    return "sqlite:///" + os.path.abspath(os.path.join(state_folder(settings), filename))

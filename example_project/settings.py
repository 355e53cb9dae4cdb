"""Settings of the example project: `scrapy crawl catalog` from the repository root.

This is what a project using scrapy-scale looks like: an ordinary Scrapy project with
one add-on line. Everything below the add-on is plain Scrapy and optional.
"""

BOT_NAME = "scrapy_scale_example"
SPIDER_MODULES = ["example_project.spiders"]
NEWSPIDER_MODULE = "example_project.spiders"

# The one line that turns on scrapy-scale: failure classes and retries per class,
# the persisted frontier (resumes after a crash), idempotent item storage and the
# run summary. It runs on embedded defaults (SQLite files under ./.scale), so no
# server is needed. Any SCALE_* setting (every one is listed in docs/settings.md) can
# be set here; a bad value stops the crawl at startup with the setting's name.
ADDONS = {"scrapy_scale.Addon": 0}

# Where the embedded state lives (frontier and items, one folder per project).
# SCALE_STATE_DIR = ".scale"

# Be polite to the sites you crawl. The add-on already obeys robots.txt and keeps
# at most 4 requests in flight per site; on top of that, wait about 0.2 s between
# requests to one site (Scrapy randomizes it between 0.1 and 0.3 s).
DOWNLOAD_DELAY = 0.2
USER_AGENT = "scrapy-scale-example (+https://example.com/bot)"  # say who you are

# INFO shows Scrapy's startup, every 10 s Scrapy's stats line and scrapy-scale's
# progress line (done, pending, failed, rates, ETA), the faults the crawl handled and,
# at the end, scrapy-scale's run summary. DEBUG shows every request.
LOG_LEVEL = "INFO"
LOGSTATS_INTERVAL = 10.0
SCALE_PROGRESS_INTERVAL = 10.0  # the default is a line a minute, for long runs

# The telnet console is a debugging tool; this demo does not need an open port.
TELNETCONSOLE_ENABLED = False

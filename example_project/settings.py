"""Settings of the example project: `scrapy crawl catalog` from the repository root."""

BOT_NAME = "scrapy_scale_example"
SPIDER_MODULES = ["example_project.spiders"]
NEWSPIDER_MODULE = "example_project.spiders"

# everything scrapy-scale has, on its embedded defaults
ADDONS = {"scrapy_scale.Addon": 0}

LOG_LEVEL = "INFO"

"""Reading and operating a job's frontier from outside a crawl: the read-only status that
other packages and ``scrapy scale status`` read, and the operations behind ``scrapy scale``."""

"""Crawl tests: real processes and servers (`pytest.mark.crawl`, some also `serial`)."""

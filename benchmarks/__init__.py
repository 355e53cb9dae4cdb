"""Benchmarks of scrapy-scale: crawls of the testbed, compared side by side (see README.md)."""

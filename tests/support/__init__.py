"""Helpers for the tests (no tests here): crawl runners, services, spider modules."""

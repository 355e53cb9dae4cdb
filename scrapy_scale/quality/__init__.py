"""Data quality: validation and quarantine before storage, the end-of-run consistency report
against earlier runs, raw snapshots of failed parses and their replay (docs/quality.md)."""

from scrapy_scale.quality.pipeline import QuarantinedDrop, ValidationPipeline
from scrapy_scale.quality.raw_pages import Snapshots
from scrapy_scale.quality.report_extension import QualityReport

__all__ = ["QualityReport", "QuarantinedDrop", "Snapshots", "ValidationPipeline"]

"""Signals of scrapy-scale (connect with ``crawler.signals.connect``).

``outcome``: sent once per download attempt and once for a request's final result.
Handlers receive ``outcome`` (:class:`scrapy_scale.outcomes.model.Outcome`),
``request`` and ``spider``.
"""

outcome = object()

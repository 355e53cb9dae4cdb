"""The Scrapy-facing scheduler (:mod:`.scheduler`) and its units: the in-flight ledger,
the lease buffer, the store sync and its rounds, pacing, joining a run, the stats."""

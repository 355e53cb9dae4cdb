"""Frontier records: what a record holds and its states, the request codec and what a
record may name or store, which record a request belongs to, and plain URL seeds."""

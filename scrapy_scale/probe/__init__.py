"""``scrapy scale probe``: find the concurrency a site takes (see docs/commands.md).

:mod:`.policy` (the staircase, stop rules, bisection, recommendation; plain Python),
:mod:`.figures` (a step's figures from its answers), :mod:`.load` (the load generator),
:mod:`.run` (robots.txt, then the steps), :mod:`.report` (table, JSON, PNG, profile file),
:mod:`.cli` (the command's options).
"""

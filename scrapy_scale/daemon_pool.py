"""A Twisted thread pool whose threads never hold the process open at exit.

Every background thread of the project (frontier store, throttle, metrics reads) uses
it: a second Ctrl-C stops the reactor without closing the spider, and a non-daemon
thread then blocks the interpreter's exit forever (tests/crawl/test_frontier_contracts.py,
``test_a_second_ctrl_c_exits...``). What must be written before exit is written by the
components' own shutdown hooks, not by waiting for these threads.
"""

from __future__ import annotations

import threading
from typing import Any

from twisted.python.threadpool import ThreadPool


def _daemon_thread(*args: Any, **kwargs: Any) -> threading.Thread:
    t = threading.Thread(*args, **kwargs)
    t.daemon = True
    return t


class DaemonThreadPool(ThreadPool):
    threadFactory = staticmethod(_daemon_thread)  # type: ignore[assignment]

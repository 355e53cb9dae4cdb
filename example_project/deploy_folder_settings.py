"""The settings `scrapy` commands read when run from this folder (example_project/scrapy.cfg).

Run from here (the folder `scrapyd-deploy` deploys from), Scrapy puts this folder on
`sys.path`, where `example_project.settings` cannot be imported: the package *is* this
folder. This module puts the folder above on `sys.path` and takes the project's settings,
so `scrapy scale status catalog`, `scrapy list`... work here as from the repository root.
The egg scrapyd runs does not use it (setup.py names `example_project.settings`).
"""

import os
import sys

_above = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _above not in sys.path:
    sys.path.insert(0, _above)

from example_project.settings import *  # noqa: E402,F403

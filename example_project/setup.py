"""The example project's egg for scrapyd: `cd example_project && scrapyd-deploy`.

Only the project goes in the egg (the package ``example_project`` is this folder);
scrapy-scale itself is installed in scrapyd's environment (eggs bring no dependencies).
scrapyd-deploy uses this file instead of writing a ``setup.py`` of its own.
"""

from setuptools import setup

setup(
    name="scrapy_scale_example",
    version="1.0",
    packages=["example_project", "example_project.spiders"],
    package_dir={"example_project": "."},
    entry_points={"scrapy": ["settings = example_project.settings"]},
    zip_safe=False,
)

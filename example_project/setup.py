"""The example project's egg for scrapyd: `cd example_project && scrapyd-deploy`.

Only the project goes in the egg (the package ``example_project`` is this folder);
scrapy-scale itself is installed in scrapyd's environment (eggs bring no dependencies).
scrapyd-deploy uses this file instead of writing a ``setup.py`` of its own.
"""

from setuptools import setup
from setuptools.command.build_py import build_py

#: read by `scrapy` commands run in this folder (scrapy.cfg), never by the deployed project
LOCAL_ONLY = "deploy_folder_settings"


class ProjectOnly(build_py):
    """The project's modules, without the one that serves commands run in this folder."""

    def find_package_modules(self, package, package_dir):
        return [m for m in super().find_package_modules(package, package_dir) if m[1] != LOCAL_ONLY]


setup(
    name="scrapy_scale_example",
    version="1.0",
    packages=["example_project", "example_project.spiders"],
    package_dir={"example_project": "."},
    entry_points={"scrapy": ["settings = example_project.settings"]},
    cmdclass={"build_py": ProjectOnly},
    zip_safe=False,
)

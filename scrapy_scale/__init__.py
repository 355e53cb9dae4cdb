"""scrapy-scale: Scrapy plugins that keep a crawl healthy at scale."""

from scrapy_scale import moved
from scrapy_scale.addon import Addon
from scrapy_scale.config import ScaleSettingError

__all__ = ["Addon", "ScaleSettingError"]
__version__ = "0.4.0"

moved.install()  # former import paths (scrapy_scale/moved.py)

"""Mirrors python/sglang/srt/plugins/__init__.py (commit 32c764af):
load_plugins() loads the `sglang.plugins` entry points of the installed
distributions (only those SGLANG_PLUGINS names, when it is set) and calls
each with no arguments, once per process."""
import logging
import os
from importlib.metadata import entry_points

logger = logging.getLogger(__name__)
GENERAL_PLUGINS_GROUP = "sglang.plugins"
_plugins_loaded = False


def load_plugins_by_group(group):
    allowed = os.environ.get("SGLANG_PLUGINS")
    allowed = {x.strip() for x in allowed.split(",") if x.strip()} if allowed else None
    plugins = {}
    for ep in entry_points(group=group):
        if allowed is not None and ep.name not in allowed:
            continue
        plugins[ep.name] = (ep.load(), ep.dist.name if ep.dist else None)
    return plugins


def load_plugins():
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for name, (func, _) in load_plugins_by_group(GENERAL_PLUGINS_GROUP).items():
        func()
        logger.info("Executed general plugin: %s", name)

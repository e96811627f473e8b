"""Shared plumbing for plugins: option, tier and typed argument readers."""

from __future__ import annotations

from typing import ClassVar

from scheduler.core.config import PluginName, PluginOption
from scheduler.core.framework import Session

__all__ = ["PluginBase"]


class PluginBase:
    """A plugin at ``tier`` configured by ``option``; a :class:`~scheduler.core.framework.PluginSlot`.

    Subclasses set ``name`` and register their callbacks in :meth:`on_session_open`
    through the session's ``add_*`` methods, passing ``self``.
    """

    name: ClassVar[PluginName]

    def __init__(self, option: PluginOption, tier: int) -> None:
        self.option = option
        self.tier = tier

    def on_session_open(self, ssn: Session) -> None:
        raise NotImplementedError

    def on_session_close(self, ssn: Session) -> None:
        return None

    def argument(self, key: str, default: object) -> object:
        """The configured argument ``key`` as written (YAML scalar), else ``default``."""
        return self.option.arguments.get(key, default)

    def int_argument(self, key: str, default: int) -> int:
        value = self.option.arguments.get(key, default)
        return int(value)

    def bool_argument(self, key: str, default: bool) -> bool:
        return bool(self.option.arguments.get(key, default))

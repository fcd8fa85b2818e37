"""Plugin registry: pre-routing hooks, post-routing hooks and ranking signals from outside packages.

A plugin is a callable that receives the registry and registers what it brings. Plugins come from
entry points (group "memoria_pg.plugins") or from a "module:function[,module:function]" setting.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from importlib import metadata
from typing import TypeVar

from .errors import ConfigError
from .query.routing import PostRoutingHook, PreRoutingHook
from .ranking import SignalPlugin

ENTRY_POINT_GROUP = "memoria_pg.plugins"
T = TypeVar("T")


@dataclass
class PluginRegistry:
    pre_routing: list[PreRoutingHook] = field(default_factory=list)
    post_routing: list[PostRoutingHook] = field(default_factory=list)
    ranking_signals: list[SignalPlugin] = field(default_factory=list)
    loaded: list[str] = field(default_factory=list)  # names of the plugins that registered

    def register_pre_routing(self, hook: PreRoutingHook) -> PreRoutingHook:
        """Add a (ProcessedQuery) -> ProcessedQuery | None hook; returns it (usable as a decorator)."""
        self.pre_routing.append(_callable(hook, "pre-routing hook"))
        return hook

    def register_post_routing(self, hook: PostRoutingHook) -> PostRoutingHook:
        """Add a (ProcessedQuery, Route) -> Route | None hook; returns it (usable as a decorator)."""
        self.post_routing.append(_callable(hook, "post-routing hook"))
        return hook

    def register_ranking_signal(self, signal: SignalPlugin) -> SignalPlugin:
        """Add a signal with `name`, `weight` and `__call__(query, candidate) -> float in [0, 1]`."""
        name = getattr(signal, "name", None)
        if not isinstance(name, str) or not name:
            raise ConfigError(f"ranking signal {signal!r} has no name")
        if not isinstance(getattr(signal, "weight", None), (int, float)):
            raise ConfigError(f"ranking signal {name!r} has no numeric weight")
        if any(s.name == name for s in self.ranking_signals):
            raise ConfigError(f"ranking signal {name!r} is already registered")
        self.ranking_signals.append(_callable(signal, f"ranking signal {name!r}"))
        return signal

    def load_entry_points(self, group: str = ENTRY_POINT_GROUP) -> list[str]:
        """Call every installed entry point of `group` with this registry; returns their names."""
        names = []
        for ep in metadata.entry_points(group=group):
            try:
                plugin = ep.load()
            except Exception as exc:
                raise ConfigError(f"cannot load plugin entry point {ep.name!r} ({ep.value}): {exc}") from exc
            self._run(plugin, f"{ep.name} ({ep.value})")
            names.append(ep.name)
        return names

    def load_from_config(self, spec: str) -> list[str]:
        """Load "module:function[,module:function]" plugins (e.g. MEMORIA_PLUGINS); returns them."""
        items = [item.strip() for item in spec.split(",") if item.strip()]
        for item in items:
            self._run(_resolve(item), item)
        return items

    def _run(self, plugin: object, name: str) -> None:
        if not callable(plugin):
            raise ConfigError(f"plugin {name!r} is not callable")
        try:
            plugin(self)
        except Exception as exc:
            raise ConfigError(f"plugin {name!r} failed to register: {exc}") from exc
        self.loaded.append(name)


def _resolve(item: str) -> object:
    module_name, sep, attr = item.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"invalid plugin spec {item!r}: expected module:function")
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"invalid plugin spec {item!r}: cannot import {module_name!r}: {exc}") from exc
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigError(f"invalid plugin spec {item!r}: {module_name!r} has no {attr!r}") from None
    return target


def _callable(obj: T, what: str) -> T:
    if not callable(obj):
        raise ConfigError(f"{what} {obj!r} is not callable")
    return obj

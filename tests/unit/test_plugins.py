import dataclasses
import textwrap
from importlib import metadata

import pytest

from memoria_pg import plugins
from memoria_pg.core.types import ProcessedQuery
from memoria_pg.errors import ConfigError
from memoria_pg.plugins import PluginRegistry
from memoria_pg.query.routing import Router
from memoria_pg.ranking import RankingPipeline

PLUGIN_SOURCE = textwrap.dedent("""
    import dataclasses

    class Boost:
        name = "boost"
        weight = 0.3

        def __call__(self, query, candidate):
            return 1.0

    def register(registry):
        registry.register_pre_routing(lambda q: dataclasses.replace(q, memory_type_hint="fact"))
        registry.register_ranking_signal(Boost())

    def register_post(registry):
        @registry.register_post_routing
        def shallow(query, route):
            return dataclasses.replace(route, graph_depth=0)

    class Holder:
        @staticmethod
        def nested(registry):
            registry.register_post_routing(lambda q, r: None)

    def broken(registry):
        raise RuntimeError("boom")

    not_callable = 42
""")


@pytest.fixture
def module_name(tmp_path, monkeypatch, request):
    name = f"memoria_test_plugin_{request.node.name.replace('[', '_').replace(']', '_').replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(PLUGIN_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def query():
    return ProcessedQuery(text="q", normalized="q", tokens=["q"], tenant="t")


def test_load_from_config_registers_and_hooks_take_effect(module_name):
    registry = PluginRegistry()
    spec = f" {module_name}:register , {module_name}:register_post,{module_name}:Holder.nested"
    loaded = registry.load_from_config(spec)
    assert loaded == [f"{module_name}:register", f"{module_name}:register_post", f"{module_name}:Holder.nested"]
    assert registry.loaded == loaded
    assert len(registry.pre_routing) == 1 and len(registry.post_routing) == 2
    assert [s.name for s in registry.ranking_signals] == ["boost"]
    route = Router(pre_hooks=registry.pre_routing, post_hooks=registry.post_routing).route(query())
    assert route.name == "fact" and route.graph_depth == 0
    pipeline = RankingPipeline(signal_plugins=registry.ranking_signals)
    assert pipeline.signal_plugins[0].weight == 0.3


def test_empty_spec_loads_nothing():
    registry = PluginRegistry()
    assert registry.load_from_config("  , ") == []
    assert registry.pre_routing == registry.post_routing == registry.ranking_signals == []


@pytest.mark.parametrize(
    "spec, message",
    [
        ("no_colon_here", "invalid plugin spec 'no_colon_here': expected module:function"),
        (":register", "expected module:function"),
        ("memoria_no_such_module_xyz:register", "cannot import 'memoria_no_such_module_xyz'"),
    ],
)
def test_bad_specs_name_the_spec(spec, message):
    with pytest.raises(ConfigError, match=message):
        PluginRegistry().load_from_config(spec)


def test_bad_attribute_and_failures_name_the_spec(module_name):
    with pytest.raises(ConfigError, match=f"invalid plugin spec '{module_name}:missing'.*has no 'missing'"):
        PluginRegistry().load_from_config(f"{module_name}:missing")
    with pytest.raises(ConfigError, match="is not callable"):
        PluginRegistry().load_from_config(f"{module_name}:not_callable")
    with pytest.raises(ConfigError, match=f"plugin '{module_name}:broken' failed to register: boom"):
        PluginRegistry().load_from_config(f"{module_name}:broken")


def test_duplicate_signal_rejected(module_name):
    registry = PluginRegistry()
    registry.load_from_config(f"{module_name}:register")
    with pytest.raises(ConfigError, match="'boost' is already registered"):
        registry.load_from_config(f"{module_name}:register")


def test_register_validation():
    registry = PluginRegistry()
    with pytest.raises(ConfigError, match="not callable"):
        registry.register_pre_routing(3)
    with pytest.raises(ConfigError, match="has no name"):
        registry.register_ranking_signal(lambda q, c: 1.0)
    nameless_weight = dataclasses.make_dataclass("S", [("name", str)])("x")
    with pytest.raises(ConfigError, match="numeric weight"):
        registry.register_ranking_signal(nameless_weight)


def test_load_entry_points(module_name, monkeypatch):
    eps = metadata.EntryPoints(
        [
            metadata.EntryPoint(name="demo", value=f"{module_name}:register", group="memoria_pg.plugins"),
        ]
    )
    seen = {}

    def fake_entry_points(group):
        seen["group"] = group
        return eps.select(group=group)

    monkeypatch.setattr(plugins.metadata, "entry_points", fake_entry_points)
    registry = PluginRegistry()
    assert registry.load_entry_points() == ["demo"]
    assert seen["group"] == "memoria_pg.plugins"
    assert [s.name for s in registry.ranking_signals] == ["boost"]
    assert PluginRegistry().load_entry_points(group="other.group") == []


def test_broken_entry_point_is_config_error(monkeypatch):
    eps = metadata.EntryPoints(
        [
            metadata.EntryPoint(name="bad", value="memoria_no_such_module_xyz:register", group="memoria_pg.plugins"),
        ]
    )
    monkeypatch.setattr(plugins.metadata, "entry_points", lambda group: eps.select(group=group))
    with pytest.raises(ConfigError, match="entry point 'bad'"):
        PluginRegistry().load_entry_points()

"""The sides of a diff in the tests: an engine at a manifest config, with rule switches."""

from checker.methods import diff
from model import registry
from properties.manifest import load


def side(name, config, switches=None):
    """Engine `name` at manifest config `config`, its rule switches set to `switches`."""
    engine = registry.get(name)
    raw = engine.config_to_dict(load().configs[config].config)
    if switches:
        raw["rules"] = switches
    return diff.Side(engine=engine.name, config=engine.parse_config(raw), label=name)

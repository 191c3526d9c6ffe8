"""YAML loading that refuses what PyYAML would silently accept: duplicate keys (it keeps the last)
and yes/no/on/off booleans; an unquoted 1e-3 reads as the number it looks like."""
from __future__ import annotations

import re
from typing import Any

import yaml

from tuner.schema import ExperimentError


class _Bool:
    """A YAML 1.1 boolean written as yes/no/on/off/y/n: kept aside so the schema can refuse it."""

    def __init__(self, text: str):
        self.text = text


class Loader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: Loader, node: yaml.MappingNode, deep: bool = False):
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first at line {seen[key] + 1}); YAML would keep only the last",
                key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


def _construct_bool(loader: Loader, node: yaml.ScalarNode):
    text = loader.construct_scalar(node)
    return text.lower() == "true" if text.lower() in ("true", "false") else _Bool(text)


Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
Loader.add_constructor("tag:yaml.org,2002:bool", _construct_bool)
# YAML 1.1 wants a dot in a float, so PyYAML reads an unquoted 1e-3 as a string; resolve
# it as the number it looks like (a quoted "1e-3" stays text).
Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$"),
                              list("-+0123456789"))

_DROP = object()  # a value already reported as a problem: left out so it is not reported twice


def clean(node: Any, path: str, problems: list[str]) -> Any:
    """yes/no/on/off booleans are refused (each reported once, its key left out)."""
    if isinstance(node, dict):
        out = {k: clean(v, f"{path}.{k}" if path else str(k), problems) for k, v in node.items()}
        return {k: v for k, v in out.items() if v is not _DROP}
    if isinstance(node, list):
        return [clean(v, f"{path}[{i}]", problems) for i, v in enumerate(node)]
    if isinstance(node, _Bool):
        problems.append(f"{path}: {node.text!r} is read by YAML as a boolean; write true/false for a "
                        f"switch, or quote it (\"{node.text}\") for text")
        return _DROP
    return node


def read_yaml(text: str, source: str) -> dict[str, Any]:
    try:
        raw = yaml.load(text, Loader=Loader)  # a SafeLoader: no Python objects
    except yaml.YAMLError as e:
        raise ExperimentError(source, [f"not valid YAML: {e}"]) from None
    if not isinstance(raw, dict):
        raise ExperimentError(source, ["the file must be a mapping of settings (name:, train:, search: ...)"])
    return raw


"""Finding a model by what a scenario names: a catalog name, or a local Hugging Face ``config.json`` (a file or a
folder holding one). The catalog (:mod:`simulator.catalog.models`) and the config reader
(:mod:`simulator.catalog.hf_config`) stay apart; this module joins them."""

from __future__ import annotations

from pathlib import Path

from simulator.catalog.hf_config import config_file, load_hf_config, looks_like_config_path
from simulator.catalog.models import ModelSpec, model_catalog
from simulator.errors import InputError


def get_model(name: str, file: str | None = None, field: str = "model", base_dir: Path | None = None) -> ModelSpec:
    """A catalog model by name, or the model a local Hugging Face ``config.json`` describes when ``name`` is a path
    (a file or a folder holding one; relative to ``base_dir`` first, e.g. a scenario's folder): see
    :mod:`simulator.catalog.hf_config`."""
    cat = model_catalog()
    if name in cat:
        return cat[name]
    if looks_like_config_path(name):
        path = config_file(name, base_dir)
        if path is None:
            raise InputError(file, field, f"no config.json at {name!r} (a catalog name or a path to a config.json)")
        try:
            return load_hf_config(path)
        except InputError as e:  # a scenario's field pointed at it: name the field too, then the config's own words
            if file is None:
                raise
            raise InputError(file, field, e.one_line()) from None
    raise InputError(file, field, f"unknown model {name!r}; known: {', '.join(sorted(cat))} (or a path to a config.json)")

"""Hardware and model catalogs: validated data files shipped with the package."""

from simulator.catalog.hardware import HardwareSpec, hardware_catalog, get_hardware
from simulator.catalog.models import ModelSpec, model_catalog
from simulator.catalog.model_lookup import get_model

__all__ = ["HardwareSpec", "ModelSpec", "hardware_catalog", "model_catalog", "get_hardware", "get_model"]

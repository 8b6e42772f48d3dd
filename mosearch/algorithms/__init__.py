"""Search algorithms: MaOEA-CS (pymoo Algorithm) and the registry of baselines it is compared with."""

from mosearch.algorithms.baselines import REGISTRY, Baseline
from mosearch.algorithms.maoea_cs import MaOEACS

__all__ = ["MaOEACS", "REGISTRY", "Baseline"]

"""Request-level dynamic batching as an EngineModel: the baselines' transition system
(model/baselines/static.py) launched whenever no batch runs, finished rows not computed."""

from __future__ import annotations

from model.baselines.config import DYNAMIC_DEFAULTS, ENGINE_DYNAMIC
from model.baselines.static import make_engine

ENGINE = make_engine(ENGINE_DYNAMIC, "request-level dynamic batching", DYNAMIC_DEFAULTS)

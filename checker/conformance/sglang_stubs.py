"""Import-time stand-ins for two packages SGLang (v0.5.22) imports at module load but its
scheduler never calls on a CPU, so `checker.conformance.sglang_real` can import it from a
venv without them.

- `torchvision`: imported by the multimodal config helpers (`configs/__init__.py` ->
  `multimodal/internvl_utils.py`). The registry's torchvision is a CUDA build that fails
  to load beside the CPU torch wheel ("operator torchvision::nms does not exist"), so the
  stand-in is installed whether or not a torchvision is present.
- `triton`: imported unconditionally by SGLang's kernel modules (`utils/common.py:90`),
  1 GB installed. The stand-in's driver probe raises, so SGLang sees "no Triton device",
  as real Triton does on a machine without a GPU; with `attention_backend=torch_native`
  the KV index writes take their torch fallback (`mem_cache/allocation.py:56-106`) and no
  Triton kernel is launched. Installed only when triton is missing or
  `BATCHPROOF_STUB_TRITON=1`.

A stand-in module returns, for any attribute, a class-like dummy (usable as a base class,
decorator or enum member) and, for any submodule, another stand-in. If SGLang ever calls
one on the scheduler's path the result fails loudly (a dummy is no number or string).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from collections.abc import Iterable
from typing import Any


class _Meta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Dummy()


class _Dummy(metaclass=_Meta):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _Dummy()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Dummy()


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        full = f"{self.__name__}.{name}"
        if full in sys.modules:
            return sys.modules[full]
        value = type(name, (_Dummy,), {"__module__": self.__name__})
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers imports of the stubbed top-level names (and their submodules)."""

    def __init__(self) -> None:
        self.roots: set[str] = set()

    def find_spec(self, fullname: str, path: Any, target: Any = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0+stub"
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


_FINDER = _Finder()


def stub_modules(roots: Iterable[str]) -> None:
    """Answer every later import of these top-level names with stand-ins."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    _FINDER.roots |= set(roots)


class _NoTritonDriver:
    def get_current_target(self) -> Any:
        raise RuntimeError("no triton driver (batchproof stand-in)")

    def get_current_device(self) -> Any:
        raise RuntimeError("no triton driver (batchproof stand-in)")


def triton_stubbed() -> bool:
    """Whether the triton stand-in is (to be) used: triton missing, or asked for."""
    if "triton" in _FINDER.roots:
        return True
    return (os.environ.get("BATCHPROOF_STUB_TRITON") == "1"
            or importlib.util.find_spec("triton") is None)


def install() -> None:
    """Install the stand-ins SGLang's import needs here (see the module doc)."""
    stub_modules(["torchvision"])
    if triton_stubbed() and "triton" not in _FINDER.roots:
        stub_modules(["triton"])
        import triton  # the stand-in
        import triton.runtime

        triton.__version__ = "3.9.0"
        triton.runtime.driver = type("driver", (), {"active": _NoTritonDriver()})()

"""Start and stop a real `vllm serve` of the tiny model in tests/data/tiny_llama on the CPU,
recording its scheduler (checker/live/recorder.py), for the live test and docs/live.md.

The model is a Llama-style config.json (2 layers, hidden size 128, a 512-token vocabulary)
served with `--load-format dummy` (random weights) and `--skip-tokenizer-init` (prompts
are token ids), so nothing is downloaded. Prefix caching is on, as `vllm serve` defaults
it; the CPU platform turns async scheduling off whatever is asked (platforms/cpu.py:
329-331), so the live engine on a CPU runs the synchronous Scheduler. vLLM's CPU attention
needs a block size that is a multiple of 32 (v1/worker/utils.py:554) and a head size it
has kernels for (64 here).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from checker.live.recorder import ENV_TRACE

TINY_MODEL = Path(__file__).resolve().parents[2] / "tests" / "data" / "tiny_llama"
START_TIMEOUT_S = 600.0


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """The `vllm serve` flags of a live run: the pool is small on purpose, so that the
    load preempts."""

    max_num_seqs: int = 16
    max_num_batched_tokens: int = 256
    num_gpu_blocks: int = 48
    block_size: int = 32
    max_model_len: int = 512
    speculative: str = ""  # "" or "ngram"
    num_speculative_tokens: int = 3
    extra: tuple[str, ...] = field(default_factory=tuple)

    def flags(self) -> list[str]:
        """The command-line flags after the model."""
        out = ["--load-format", "dummy", "--skip-tokenizer-init", "--dtype", "float32",
               "--max-num-seqs", str(self.max_num_seqs),
               "--max-num-batched-tokens", str(self.max_num_batched_tokens),
               "--num-gpu-blocks-override", str(self.num_gpu_blocks),
               "--block-size", str(self.block_size),
               "--max-model-len", str(self.max_model_len),
               "--gpu-memory-utilization", "0.2", "--enable-prefix-caching"]
        if self.speculative:
            out += ["--speculative-config",
                    f'{{"method": "{self.speculative}", "num_speculative_tokens": '
                    f'{self.num_speculative_tokens}, "prompt_lookup_max": 3, '
                    '"prompt_lookup_min": 1}']
        return out + list(self.extra)


def free_port() -> int:
    """A free loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """A running server: its process, port, trace and log."""

    process: subprocess.Popen[bytes]
    port: int
    trace: Path | None
    log: Path

    @property
    def url(self) -> str:
        """The server's base address."""
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 30 s)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def start(trace: Path | None, options: ServeOptions, log: Path,
          pythonpath: Sequence[Path] = (), python: str = sys.executable) -> Server:
    """Start `vllm serve` of the tiny model recording to `trace` (None: not recording);
    wait until /health answers; RuntimeError with the log's tail if it dies or does not
    answer in time. `pythonpath` goes first on the server's sys.path (a patched vLLM copy,
    as audit's overlays)."""
    port = free_port()
    env = dict(os.environ)
    env.pop(ENV_TRACE, None)
    if trace is not None:
        env[ENV_TRACE] = str(trace)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath),
                                             env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(TINY_MODEL),
           "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port),
           *options.flags()]
    with open(log, "wb") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    server = Server(process, port, trace, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"vllm serve exited with {process.returncode}: "
                               f"{_tail(log)}")
        try:
            with urllib.request.urlopen(server.url + "/health", timeout=2) as r:
                if r.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1.0)
    server.stop()
    raise RuntimeError(f"vllm serve did not answer /health in {START_TIMEOUT_S:.0f} s: "
                       f"{_tail(log)}")


def _tail(log: Path, lines: int = 15) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])

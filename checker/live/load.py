"""A load generator for a live server: `/v1/completions` with token-id prompts, Poisson
arrivals, shared prefixes, clients that go away, `max_tokens` and stop tokens mixed. Every
request's fate is kept, so a check can tell that none was lost.

Each request is sent with `X-Request-Id: <id>`; vLLM names the engine's request
`cmpl-<id>-<index>-<suffix>` (entrypoints/serve/engine/serving.py:133-142,
openai/completion/serving.py:141), which is how the trace's requests are matched to
the clients'.

Prompts: a share of them start with one of a few shared prefixes (system prompts) cut at
a random length, then the request's own tokens, drawn from ids no prefix uses, so two
prompts share exactly the prefix they both took (what the workload format's prefix groups
say, docs/simulation_contract.md). Deterministic for one seed, except for timing.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass

PREFIX_TOKENS = range(10, 200)  # ids of the shared prefixes
OWN_TOKENS = range(200, 500)  # ids of the requests' own tokens
STOP_TOKENS = (3, 4, 5, 6, 7, 8)  # stop_token_ids of the requests that have them


@dataclass(frozen=True, slots=True)
class LoadPlan:
    """What to send: `requests` in all, at most `concurrency` open at once, arrivals a
    Poisson process of `rate` per second; `prefixes` shared prefixes of up to
    `prefix_len` tokens taken by a `shared` share of requests; own tokens up to
    `own_len`; `abort_share` of clients go away after a random wait; `stop_share` of
    requests stop on STOP_TOKENS."""

    requests: int = 500
    concurrency: int = 32
    rate: float = 150.0
    prefixes: int = 4
    prefix_len: int = 160
    shared: float = 0.6
    own_len: int = 64
    max_tokens: int = 48
    abort_share: float = 0.1
    stop_share: float = 0.5
    seed: int = 0


@dataclass(frozen=True, slots=True)
class RequestPlan:
    """One request as planned."""

    id: str
    delay: float  # seconds after the start
    prompt: tuple[int, ...]
    max_tokens: int
    stop: bool
    abort_after: float | None  # seconds after sending, None to wait for the answer


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a client saw: `finished` (with vLLM's finish_reason), `aborted` (the client
    went away first) or `error` (with the HTTP status or exception)."""

    id: str
    kind: str
    reason: str = ""


def plan(p: LoadPlan) -> tuple[RequestPlan, ...]:
    """The requests of `p`, the same for one seed."""
    rng = random.Random(p.seed)
    prefixes = [[rng.choice(PREFIX_TOKENS) for _ in range(p.prefix_len)]
                for _ in range(p.prefixes)]
    out, t = [], 0.0
    for i in range(p.requests):
        t += rng.expovariate(p.rate)
        own = [rng.choice(OWN_TOKENS) for _ in range(rng.randint(1, p.own_len))]
        shared: list[int] = []
        if rng.random() < p.shared:
            shared = rng.choice(prefixes)[: rng.randint(1, p.prefix_len)]
        abort_after = rng.uniform(0.01, 0.4) if rng.random() < p.abort_share else None
        out.append(RequestPlan(id=f"lg{p.seed}-{i}", delay=t, prompt=(*shared, *own),
                               max_tokens=rng.randint(1, p.max_tokens),
                               stop=rng.random() < p.stop_share, abort_after=abort_after))
    return tuple(out)


async def _one(session: object, url: str, r: RequestPlan, start: float,
               gate: asyncio.Semaphore) -> Outcome:
    import aiohttp

    assert isinstance(session, aiohttp.ClientSession)
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(0.0, start + r.delay - loop.time()))
    body = {"model": "tiny", "prompt": list(r.prompt), "max_tokens": r.max_tokens,
            "temperature": 1.0, "stream": True, "ignore_eos": True,
            **({"stop_token_ids": list(STOP_TOKENS)} if r.stop else {})}
    async with gate:
        try:
            return await asyncio.wait_for(_stream(session, url, r, body), r.abort_after)
        except TimeoutError:
            return Outcome(r.id, "aborted")
        except (aiohttp.ClientError, OSError) as exc:
            return Outcome(r.id, "error", f"{type(exc).__name__}: {exc}")


async def _stream(session: object, url: str, r: RequestPlan, body: dict) -> Outcome:
    async with session.post(url + "/v1/completions", json=body,  # type: ignore[attr-defined]
                            headers={"X-Request-Id": r.id}) as resp:
        if resp.status != 200:
            return Outcome(r.id, "error", f"HTTP {resp.status}: {(await resp.text())[:200]}")
        reason = ""
        async for raw in resp.content:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[5:]).get("choices", ()):
                reason = choice.get("finish_reason") or reason
        return Outcome(r.id, "finished", reason)


async def _run(url: str, requests: Sequence[RequestPlan], concurrency: int
               ) -> tuple[Outcome, ...]:
    import aiohttp

    gate = asyncio.Semaphore(concurrency)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        start = asyncio.get_running_loop().time()
        return tuple(await asyncio.gather(*(_one(session, url, r, start, gate)
                                            for r in requests)))


def send(url: str, p: LoadPlan) -> tuple[Outcome, ...]:
    """Send the load of `p` to the server at `url`; every request's outcome, in plan
    order."""
    return asyncio.run(_run(url, plan(p), p.concurrency))


def engine_ids(outcomes: Sequence[Outcome], trace_ids: Sequence[str]) -> dict[str, str]:
    """Client id -> the engine's request id (`cmpl-<id>-<index>-<suffix>`, see the module
    doc), for the clients whose request reached the scheduler."""
    by_client: dict[str, str] = {}
    for rid in trace_ids:
        if rid.startswith("cmpl-"):
            by_client[rid[len("cmpl-"):].rsplit("-", 2)[0]] = rid
    return {o.id: by_client[o.id] for o in outcomes if o.id in by_client}


def unaccounted(outcomes: Sequence[Outcome], ends: dict[str, str]) -> list[str]:
    """Where the clients and the trace disagree on how a request ended: a finished client
    whose request the trace ends otherwise (or not at all), a trace request no client sent.
    An aborting client may find its request already finished (the abort came late), never
    scheduled (the front end dropped it first), or still held when the trace ends (the
    server stopped before the abort reached the engine); all are accounted for."""
    ids = engine_ids(outcomes, list(ends))
    problems = []
    for o in outcomes:
        end = ends.get(ids[o.id]) if o.id in ids else None
        if o.kind == "finished" and end != o.reason:
            problems.append(f"{o.id}: the client saw {o.reason!r}, the trace {end!r}")
        elif o.kind == "aborted" and end not in (None, "abort", "stop", "length", "held"):
            problems.append(f"{o.id}: aborted by its client, the trace ends it {end!r}")
    strangers = set(ends) - set(ids.values())
    problems += [f"{rid}: in the trace, sent by no client" for rid in sorted(strangers)]
    return problems

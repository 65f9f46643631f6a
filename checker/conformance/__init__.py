"""Conformance: the vLLM reference scheduler checked step by step against vLLM's real one.

- `vllm_real`  drives vLLM's real `Scheduler` (v0.32.0, CPU) over a workload;
- `generate`   seeded random workloads and configs (pure Python);
- `branches`   which upstream branches a batch of workloads reaches (line tracing);
- `validation` does vLLM's `SchedulerConfig` accept a config, and by which rule not;
- `shrink`     minimise a diverging workload;
- `compare`    run both schedulers and report the first diverging step.
- `in_turn`    several modes (or page sizes) compared one after the other in one process.

Only `vllm_real`, `branches` and `validation` import vLLM, and only when called.
"""

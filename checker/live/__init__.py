"""The live engine: record what a running `vllm serve` did, step by step, and check it.

- `recorder`: runs inside vLLM's engine core (a general plugin, enabled by the
  BATCHPROOF_TRACE environment variable) and writes a live trace (JSON lines);
- `trace`: reads a live trace into the workload it ran and the StepRecords it produced
  (docs/simulation_contract.md), refusing what the model does not cover;
- `verdict`: checks a live trace: every catalogue property on the real steps, every step
  against the reference replayed on the same arrivals, aborts and stops, and every request
  accounted for.

docs/live.md is the user's page.
"""

"""vLLM V0 (0.10.2): its configuration and reference scheduler (not registered as an engine
yet; docs/vllm_versions.md, "vLLM V0")."""

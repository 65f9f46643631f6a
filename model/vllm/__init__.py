"""model/vllm"""

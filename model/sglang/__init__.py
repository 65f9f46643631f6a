"""model/sglang"""

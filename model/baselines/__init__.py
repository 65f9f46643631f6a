"""model/baselines"""

"""checker/methods"""

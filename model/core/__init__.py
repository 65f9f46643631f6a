"""model/core"""

"""checker/config"""

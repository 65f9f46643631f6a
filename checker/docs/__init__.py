"""checker/docs"""

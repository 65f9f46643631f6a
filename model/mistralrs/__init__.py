"""model/mistralrs"""

"""Imperative reference schedulers, one per engine: readable ports of upstream."""

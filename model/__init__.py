"""What each engine does: shared state types, Ops, rules and reference schedulers."""

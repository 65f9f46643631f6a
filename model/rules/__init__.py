"""Branch-free step functions over Ops, one per engine."""

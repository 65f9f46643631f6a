"""How we decide: BMC, k-induction, exploration, replay, minimisation, and the CLI."""

"""The Gavel-faithful simulation mode (docs/simulation.md, "Gavel-faithful mode")."""

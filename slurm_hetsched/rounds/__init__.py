"""The round tick, one floor above the decision core and below both drivers: the simulator
(sim/) and the live controller (controller/) each run rounds through `rounds.tick.Tick`, so
they decide alike and neither imports the other (docs/architecture.md)."""

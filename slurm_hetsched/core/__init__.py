"""The decision core: value types, throughput tables, costs, policies and the round mechanism.

Everything under `core/` is pure: it takes a snapshot and returns a decision. It never reads
files, the environment or a clock and never starts processes (tests/unit/test_layering.py
enforces this), so the simulator and the live controller decide identically.
"""

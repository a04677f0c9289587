"""Trace-driven simulation: job traces (`traces`), a synthetic trace generator (`generate`)."""

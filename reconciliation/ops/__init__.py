"""Operational tools built on the whole domain: the fault-space explorer (docs/design.md §2, §8)."""

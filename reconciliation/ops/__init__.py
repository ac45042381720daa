"""Operational tools built on the whole domain: the fault-space explorer (DESIGN.md §2, §8)."""

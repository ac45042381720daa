"""Simulation, fault injection and invariant checks, kept apart from production code
(docs/architecture.md, "Simulation"): the simulator, the fault plans and their botocore
hooks, the fault explorer and its invariant checkers, the Global Tables stand-in and the
webhook sink. A Django app (:mod:`reconciliation.simulation.apps`) installed only where
fault injection is allowed; no production module imports it (import-linter's
``production-without-simulation`` contract): it attaches to production's seams instead.
"""

"""The scenario lab (pure): simulated workdays on logical fleets, four strategies,
graduation gates, a hindsight oracle and an exact optimality gap.

Everything here runs on a simulated clock with seeded named streams
(``gridctl.lab.rng``); the only I/O is in the ``gridctl lab`` command
(``gridctl.cli.lab_cmd``), which loads blueprints, catalog and traces and
writes reports. Every tick runs the production learners, portfolio, planner
and reconciler (``gridctl.lab.control``).
"""

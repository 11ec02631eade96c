"""gridctl: declarative placement of AI models on a mixed fleet.

Operators commit model profiles, modes and policies as YAML; a controller
compares that desired state with what node daemons report and converges the
fleet with fenced, explained actions.
"""

__version__ = "0.1.0"

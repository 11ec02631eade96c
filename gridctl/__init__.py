"""gridctl: declarative placement of AI models on a mixed fleet.

Operators commit model profiles, modes and policies as YAML; a controller
compares that desired state with what node daemons report and converges the
fleet with fenced, explained actions.
"""

__version__ = "0.1.0"

import sys as _sys

# httpx's package imports its own command line whenever click, rich and pygments are
# installed (they are, for textual): about 25 ms of every node, controller and CLI
# process, for a command gridctl never runs. A None entry makes that import fail, and
# httpx then leaves ``httpx.main`` as a stub; nothing else of httpx changes.
_sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

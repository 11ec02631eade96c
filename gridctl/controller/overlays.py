"""Pending work shown to the planner as in-progress residencies (``gridctl.reconcile.overlays``)."""

from gridctl.reconcile.overlays import with_pending_work

__all__ = ["with_pending_work"]

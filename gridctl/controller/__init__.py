"""The controller daemon (effectful shell): durable store, authority lease, tick loop, HTTP.

Submodules are imported explicitly (``gridctl.controller.store``,
``gridctl.controller.authority``, ...); this package imports nothing itself so
that a command needing only the store does not start the HTTP machinery.
"""

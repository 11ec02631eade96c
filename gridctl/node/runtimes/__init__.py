"""Runtime adapters: how one engine kind is started, probed and stopped on this host.

llama.cpp's ``llama-server`` is the first (and so far only) managed runtime.
"""

from gridctl.node.runtimes.llamacpp import EngineSettings, LlamaCppRuntime, SlotActivity

__all__ = ["EngineSettings", "LlamaCppRuntime", "SlotActivity"]

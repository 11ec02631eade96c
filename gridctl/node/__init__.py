"""The node daemon: durable host state, the llama.cpp actuator, command intake and the agent loop.

Everything here has side effects (SQLite, processes, psutil, HTTP); the pure
rules it relies on (fencing, planning) live in the core packages.
"""

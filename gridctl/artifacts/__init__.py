"""Artifact distribution: sources, resumable verified transfers, a Range-capable server, GGUF.

``sources`` parses an operator's source string; ``fetching`` streams it into a
staging file with Range resume, a size ceiling and a running SHA-256;
``objects`` publishes verified files into a content-addressed directory;
``serving`` is the origin and peer-mirror server; ``gguf`` reads a header.
"""

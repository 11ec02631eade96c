"""Demand observation and the short-horizon forecast (pure: no clock, no I/O).

Observations are folded into bounded time buckets of aggregate counts and a
logarithmic latency histogram; the forecast is a bucketed EWMA plus a positive
trend, and offered concurrency is arrival rate x measured service time plus
queued work. Time always arrives as an argument.
"""

"""Bounded request streams through the router with the official ``openai`` client.

A stream is one kind of user: a workload, the model it names (``auto`` lets the
router classify the text), how many requests it keeps in flight and how long
each worker rests between requests. Every request is recorded: when it started,
how long it took, which model answered, and the failure if any. A stream stops
at its deadline, at ``stop()`` or at its request cap, whichever comes first, so
no loop here is unbounded.

Retries are the production client's: ``max_retries=2`` on a 429/503 with the
router's Retry-After, as the ``openai`` client does by default. A request is a
failure only when the client gives up.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

PROMPTS = {
    "general": [
        "Say hello to the team in one sentence.",
        "Name three colours of the sky.",
        "Give me a short greeting for a Monday.",
        "What is a good name for a cat?",
    ],
    "coding": [
        "Fix this python bug: print(1",
        "Write a python function that adds two numbers.",
        "Refactor this code: def f(x): return x+1",
        "Why does this typescript compile fail: let x: number = 'a'",
    ],
}


@dataclass
class Outcome:
    stream: str
    workload: str
    started: float  # seconds since the day began
    seconds: float
    model: str | None  # the model that answered
    error: str | None = None


@dataclass
class Stream:
    name: str
    workload: str
    model: str  # a model id, or "auto"
    workers: int
    rest_seconds: float
    max_tokens: int = 12
    max_requests: int = 10_000
    threads: list[threading.Thread] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)


class Traffic:
    """Runs streams against one router; thread-safe record of every outcome."""

    def __init__(self, base_url: str, day_started: float, api_key: str = "unused") -> None:
        self.base_url = base_url.rstrip("/") + "/v1"
        self.api_key = api_key
        self.day_started = day_started
        self.outcomes: list[Outcome] = []
        self._lock = threading.Lock()
        self._streams: list[Stream] = []

    def start(self, stream: Stream, until: float) -> Stream:
        """Start ``stream``'s workers; they stop at monotonic time ``until``."""
        counter = iter(range(stream.max_requests))
        for index in range(stream.workers):
            worker = threading.Thread(
                target=self._work,
                args=(stream, until, index, counter),
                name=f"demo-{stream.name}-{index}",
                daemon=True,
            )
            stream.threads.append(worker)
            worker.start()
        self._streams.append(stream)
        return stream

    def stop(self, stream: Stream) -> None:
        """Ask ``stream`` to stop: no new request; one in flight finishes and is recorded."""
        stream.stopping.set()

    def finish(self, timeout: float) -> int:
        """Stop every stream and wait up to ``timeout`` for requests in flight; returns how
        many workers were still waiting on an answer (their threads are daemons)."""
        for stream in self._streams:
            stream.stopping.set()
        deadline = time.monotonic() + timeout
        for stream in self._streams:
            for worker in stream.threads:
                worker.join(max(0.0, deadline - time.monotonic()))
        return sum(w.is_alive() for s in self._streams for w in s.threads)

    def _client(self) -> Any:
        from openai import OpenAI

        return OpenAI(base_url=self.base_url, api_key=self.api_key, max_retries=2, timeout=120)

    def _work(self, stream: Stream, until: float, index: int, counter: Any) -> None:
        client = self._client()
        prompts = PROMPTS[stream.workload]
        turn = index
        while not stream.stopping.is_set() and time.monotonic() < until:
            if next(counter, None) is None:
                return
            prompt = prompts[turn % len(prompts)]
            turn += 1
            began = time.monotonic()
            model: str | None = None
            error: str | None = None
            try:
                reply = client.chat.completions.create(
                    model=stream.model,
                    messages=[{"role": "user", "content": prompt}],
                    max_tokens=stream.max_tokens,
                    user=f"{stream.name}-{index}",
                )
                model = reply.model
                if not reply.choices or reply.choices[0].message.content is None:
                    error = "empty answer"
            except Exception as exc:  # the client gave up: the failure is recorded
                status = getattr(exc, "status_code", None)
                error = f"{type(exc).__name__}" + (f" {status}" if status else "")
            self._record(
                Outcome(
                    stream.name,
                    stream.workload,
                    began - self.day_started,
                    time.monotonic() - began,
                    model,
                    error,
                )
            )
            stream.stopping.wait(stream.rest_seconds)

    def _record(self, outcome: Outcome) -> None:
        with self._lock:
            self.outcomes.append(outcome)

    def snapshot(self) -> list[Outcome]:
        with self._lock:
            return list(self.outcomes)

"""Users, personas and bounded synthetic projects.

Each user has a persona (a workload mix and a request rate); users are
grouped into at most ``MAX_PROJECTS`` projects. A project walks its lead's
fixed sequence of work stages (a marketing team: research, marketing,
design, image), each stage a stable number of minutes on one clock; members
mostly send requests of the current stage, within one session per pass
through the sequence, so the production sequence learner can discover the
stage order. Request *counts* stay independently sampled per user and minute.
"""

from __future__ import annotations

from dataclasses import dataclass

from gridctl.lab.rng import Stream

MAX_PROJECTS = 64
PROJECT_SIZE = 8
STAGE_MINUTES = 15
STAGE_SHARE = 0.85  # share of a member's requests that follow the project's stage


@dataclass(frozen=True)
class Persona:
    name: str
    mix: tuple[tuple[str, float], ...]
    rate_per_minute: float
    names_model: bool = False  # operations traffic names the baseline model directly


PERSONAS: tuple[tuple[Persona, float], ...] = (
    (Persona("developer", (("coding", 0.8), ("research", 0.1), ("general", 0.1)), 0.6), 25),
    (Persona("researcher", (("research", 0.7), ("general", 0.2), ("embedding", 0.1)), 0.4), 12),
    (Persona("marketer", (("marketing", 0.6), ("design", 0.2), ("image", 0.2)), 0.4), 10),
    (Persona("sales", (("sales", 0.7), ("general", 0.3)), 0.3), 10),
    (Persona("designer", (("design", 0.5), ("image", 0.4), ("video", 0.1)), 0.3), 8),
    (Persona("creative", (("image", 0.5), ("video", 0.2), ("design", 0.3)), 0.25), 6),
    (Persona("analyst", (("embedding", 0.6), ("research", 0.4)), 0.5), 8),
    (Persona("generalist", (("general", 1.0),), 0.3), 15),
    (Persona("operations", (("general", 1.0),), 0.5, names_model=True), 6),
)

WORKFLOWS: dict[str, tuple[str, ...]] = {
    "developer": ("coding", "research", "coding", "embedding"),
    "researcher": ("research", "embedding", "general"),
    "marketer": ("research", "marketing", "design", "image"),
    "sales": ("research", "sales", "marketing"),
    "designer": ("design", "image", "video"),
    "creative": ("marketing", "design", "image"),
    "analyst": ("embedding", "research", "general"),
    "generalist": ("general", "research"),
    "operations": ("general",),
}


@dataclass(frozen=True)
class Project:
    """A team: its lead persona's workflow, on one clock every member shares."""

    project_id: str
    stages: tuple[str, ...]
    offset: int  # minutes into its cycle at the scenario's start


@dataclass(frozen=True)
class User:
    user_id: str
    persona: Persona
    project: Project

    def stage_at(self, minute: int) -> tuple[str, int]:
        """The project's stage workload at ``minute`` and which pass through its workflow."""
        stages = self.project.stages
        position = minute + self.project.offset
        stage = (position // STAGE_MINUTES) % len(stages)
        cycle = position // (STAGE_MINUTES * len(stages))
        return stages[stage], cycle


def population(users: int, seed: int) -> tuple[User, ...]:
    """``users`` users with seeded personas, grouped into bounded projects."""
    if users < 1:
        raise ValueError(f"users must be at least 1, got {users}")
    stream = Stream(seed, "population")
    weights = [w for _, w in PERSONAS]
    personas = [PERSONAS[stream.weighted(weights)][0] for _ in range(users)]
    count = min(MAX_PROJECTS, max(1, -(-users // PROJECT_SIZE)))
    projects: list[Project] = []
    for index in range(count):
        stages = WORKFLOWS[personas[index * users // count].name]  # the team lead's workflow
        offset = stream.below(STAGE_MINUTES * len(stages))
        projects.append(Project(f"project-{index:02d}", stages, offset))
    return tuple(
        User(f"user-{i:04d}", personas[i], projects[i * count // users]) for i in range(users)
    )


def average_mix(people: tuple[User, ...]) -> dict[str, float]:
    """The declared population's average requests per minute per workload (static's input)."""
    mix: dict[str, float] = {}
    for user in people:
        total = sum(share for _, share in user.persona.mix)
        for workload, share in user.persona.mix:
            rate = user.persona.rate_per_minute * share / total
            mix[workload] = mix.get(workload, 0.0) + rate
    return dict(sorted(mix.items()))

"""A tiny third-party policy package: proves the entry-point registry loads outside policies."""
from pydantic import Field

from spark_governor.policies.base import JobView, Policy, Proposal
from spark_governor.policies.safety import SafetyConfig


class FixedConfig(SafetyConfig):
    target: int = Field(2, ge=0, description="Executors to keep")


class FixedExecutors(Policy):
    name = "fixed-executors"
    knobs = ("executors",)
    Config = FixedConfig
    description = "Always asks for `target` executors"

    def evaluate(self, view: JobView, config: FixedConfig):
        current = view.current("executors")
        if current is None or current == config.target:
            return []
        return [Proposal("executors", config.target, f"keep {config.target}", {"executors": current},
                         {"executors": config.target})]

    def observe(self, view: JobView, knob: str, config) -> dict:
        return {} if view.executors is None else {"executors": view.executors}


class AlwaysFails(Policy):
    name = "always-fails"
    knobs = ("exchanges",)
    Config = SafetyConfig
    description = "Raises on every evaluation"

    def evaluate(self, view, config):
        raise RuntimeError("this policy always fails")

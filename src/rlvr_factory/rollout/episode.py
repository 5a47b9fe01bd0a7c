"""An episode's trajectory: its turns exactly as sampled and observed, and what the update trains on.

In the append-only layout the trajectory is one token sequence: the prompt, then each turn's
action (the policy's tokens, exactly as sampled) and observation (the environment's reply,
encoded on its own with its turn markup). The loss mask is 1 on action tokens, 0 on the rest;
the sampling log-probs sit on the action tokens. In the per-turn layout (for chat templates
that are not append-only) each turn is its own sample: the history as the template renders
it, then that turn's action.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlvr_factory.verifiers.score import Score

# Why an episode ended: the environment said so (`done`, or the reason it gave), the last turn
# ran out of tokens (`length`), the loop's turn or context budget, or a failed environment call.
LOOP_BUDGETS = ("length", "max_turns", "context_budget")
FAILURES = ("error", "timeout", "infra_error")


@dataclass
class Turn:
    """One action and what the environment answered."""

    action: str  # the action's text (special tokens dropped)
    action_ids: list[int]  # exactly as sampled, the end-of-turn token included when sampled
    logprobs: list[float]  # sampling log-prob of each action token
    finish_reason: str  # how the action ended: stop | length
    observation: str = ""  # the environment's reply ("" after the last turn)
    observation_ids: list[int] = field(default_factory=list)  # its tokens with the turn markup (append-only layout)
    reward: float = 0.0  # the step's own reward (`Step.reward`)
    context_ids: list[int] | None = None  # per-turn layout: the rendered history this action continued


@dataclass
class Episode:
    """One try at one task: `sample_index` of task `task_index`, its turns and how it ended."""

    task_index: int
    sample_index: int
    prompt_ids: list[int]
    turns: list[Turn] = field(default_factory=list)
    finish_reason: str = ""
    out_of_budget: bool = False  # ended by a budget: the loop's (LOOP_BUDGETS) or the environment's own
    score: Score | None = None  # the environment's verdict; None: the domain's verifier judges `answer`
    answer: str | None = None  # what the verifier judges (the text the environment passed its scorer)
    info: dict[str, float] = field(default_factory=dict)  # the steps' `info` counters, summed
    error: str | None = None  # what a failed environment call said
    per_turn: bool = False  # per-turn layout

    @property
    def finished(self) -> bool:
        return bool(self.finish_reason)

    @property
    def completion_ids(self) -> list[int]:
        """Every token after the prompt: actions and observations (per-turn layout: the actions only)."""
        return [t for turn in self.turns for t in turn.action_ids + ([] if self.per_turn else turn.observation_ids)]

    @property
    def loss_mask(self) -> list[int]:
        """1 on each policy token of `completion_ids`, 0 on each observation token."""
        return [m for turn in self.turns for m in [1] * len(turn.action_ids)
                + ([] if self.per_turn else [0] * len(turn.observation_ids))]

    @property
    def logprobs(self) -> list[float]:
        """The sampling log-prob of each token of `completion_ids` (0 on observation tokens)."""
        return [x for turn in self.turns for x in turn.logprobs
                + ([] if self.per_turn else [0.0] * len(turn.observation_ids))]

    @property
    def context_ids(self) -> list[int]:
        """The context the next action continues: the prompt and every turn so far (append-only layout)."""
        return self.prompt_ids + self.completion_ids

    @property
    def text(self) -> str:
        """The actions and observations after the prompt, as text."""
        return "".join(turn.action + turn.observation for turn in self.turns)

    @property
    def policy_tokens(self) -> int:
        return sum(len(turn.action_ids) for turn in self.turns)

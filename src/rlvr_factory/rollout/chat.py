"""Episodes as token ids under the tokenizer's chat template, built by appending, never re-tokenizing.

An episode's tokens are the prompt rendered with the generation prompt, then for each turn
the action's tokens exactly as sampled (ending in the end-of-turn token) and the
observation's tokens: the rest of the assistant turn's markup, the observation as a message
(`observation_role`, default `tool`), and the next generation prompt. That is what the
template renders for the whole history only if the template is append-only, which
`check_append_only` verifies at the start of a run by rendering a multi-turn history turn by
turn. A template that rewrites earlier turns (drops earlier reasoning, say) fails it, unless
the run trains each turn as its own sample on the history as the template renders it
(`per_turn_samples`, `render`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Sequence

NON_APPEND_ONLY = ("error", "per_turn_samples")  # what a run does with a template that is not append-only
# The history the preflight renders: earlier reasoning in the actions, so templates that strip it are caught.
_PREFLIGHT = (
    "What is 6*7?",
    ["<think>Use the tool.</think><calc>6*7</calc>", "<think>It said 42.</think>Check: <calc>42/6</calc>",
     "<think>Both agree.</think>\\boxed{42}"],
    ["<result>42</result>", "<result>7</result>"],
)
_ACTION = "\x00assistant-sentinel\x00"
_OBSERVATION = "\x00observation-sentinel\x00"


class TemplateError(ValueError):
    """The tokenizer's chat template cannot carry token-exact multi-turn episodes."""


@dataclass(frozen=True)
class Message:
    role: str
    content: str


@dataclass
class ChatFormat:
    """Token ids of prompts, actions and observations under `tokenizer`'s chat template."""

    tokenizer: Any
    observation_role: str = "tool"

    @property
    def eos_id(self) -> int:
        return self.tokenizer.eos_token_id

    @cached_property
    def template_name(self) -> str:
        """The tokenizer's name and a hash of its template, for error messages."""
        template = self.tokenizer.chat_template or ""
        digest = hashlib.sha256(template.encode()).hexdigest()[:8]
        return f"{getattr(self.tokenizer, 'name_or_path', '') or type(self.tokenizer).__name__} (template sha256 {digest})"

    def render(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> list[int]:
        """The template's own token ids for a history, ending with the generation prompt."""
        if not self.tokenizer.chat_template:
            raise TemplateError(f"tokenizer {self.template_name} has no chat template; give it one (tokenizer.chat_template)")
        try:
            rendered = self.tokenizer.apply_chat_template(
                [{"role": m.role, "content": m.content} for m in messages], add_generation_prompt=add_generation_prompt,
                tokenize=True,
            )
        except Exception as e:  # noqa: BLE001 - jinja raises anything; say which template and what to change
            raise TemplateError(
                f"the chat template of {self.template_name} cannot render a history with role "
                f"{self.observation_role!r} observations ({e}); set rollout.multi_turn.observation_role "
                "to a role it accepts (e.g. user)"
            ) from e
        return list(rendered["input_ids"])

    def prompt_ids(self, prompt: str) -> list[int]:
        """The first context of an episode: the user prompt with the generation prompt."""
        return self.render([Message("user", prompt)])

    def action_ids(self, text: str) -> list[int]:
        """A demonstrated action's tokens as the model would sample them: the text, then the end-of-turn token."""
        return self._encode(text, literal=True) + [self.eos_id]

    def observation_ids(self, observation: str) -> list[int]:
        """The tokens that follow an action's end-of-turn token: the turn markup around `observation`.

        The observation's own text is encoded with special tokens split, so an observation that
        spells `<|im_end|>` stays text and cannot forge a turn boundary.
        """
        before, after = self._observation_markup
        return self._encode(before) + self._encode(observation, literal=True) + self._encode(after)

    @cached_property
    def _observation_markup(self) -> tuple[str, str]:
        """The template's text between an action's end-of-turn token and an observation, and after it."""
        messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": _ACTION},
                    {"role": self.observation_role, "content": _OBSERVATION}]
        self.render([Message(m["role"], m["content"]) for m in messages])  # a clear error for an unknown role
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        eos = self.tokenizer.convert_ids_to_tokens(self.eos_id)
        end = text.find(_ACTION + eos)
        if end < 0 or _OBSERVATION not in text[end:]:
            raise TemplateError(
                f"the chat template of {self.template_name} does not end an assistant message with the "
                f"tokenizer's end-of-turn token {eos!r}; the model's sampled turns could not be continued"
            )
        tail = text[end + len(_ACTION) + len(eos):]
        before, _, after = tail.partition(_OBSERVATION)
        return before, after

    def _encode(self, text: str, literal: bool = False) -> list[int]:
        if not text:
            return []
        return list(self.tokenizer(text, add_special_tokens=False, split_special_tokens=literal)["input_ids"])

    def check_append_only(self) -> None:
        """Raise `TemplateError` unless each turn's rendering extends the previous turn's token by token
        and equals the prompt, actions and observations appended one after another."""
        question, actions, observations = _PREFLIGHT
        history = [Message("user", question)]
        appended = self.prompt_ids(question)
        previous = appended
        for turn, (action, observation) in enumerate(zip(actions, observations), start=1):
            history += [Message("assistant", action), Message(self.observation_role, observation)]
            rendered = self.render(history)
            appended = appended + self.action_ids(action) + self.observation_ids(observation)
            if rendered[: len(previous)] != previous:
                at = _first_difference(rendered, previous)
                raise TemplateError(
                    f"the chat template of {self.template_name} is not append-only: rendering turn {turn} changes "
                    f"the tokens of the turns before it (first difference at token {at}: "
                    f"{self.tokenizer.decode(previous[at:at + 12])!r} became {self.tokenizer.decode(rendered[at:at + 12])!r}). "
                    "Set rollout.multi_turn.non_append_only: per_turn_samples to train each turn as its own "
                    "sample on the history as the template renders it"
                )
            if rendered != appended:
                raise TemplateError(
                    f"the chat template of {self.template_name} renders turn {turn} as other tokens than the "
                    f"prompt, the sampled action and the observation appended: {self.tokenizer.decode(rendered)!r} "
                    f"vs {self.tokenizer.decode(appended)!r}. Set rollout.multi_turn.non_append_only: "
                    "per_turn_samples to train on the template's own rendering"
                )
            previous = rendered


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    """The first position where two token lists differ (the shorter one's length if one extends the other)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))

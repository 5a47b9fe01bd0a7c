"""The project's parameters as one typed tree: every block of `conf/**/parameters*.yml`.

Each block is a dataclass; its fields hold the only copy of each default (the library's
dataclasses for the leaves: `UpdateConfig`, `SamplingConfig`, `SFTConfig`, `RolloutConfig`,
`RetryPolicy`, ...), and the YAML overrides them. `resolve(params)` checks a merged parameter
dict against the tree (unknown keys, types, ranges) and returns it with every default filled
in: the project's config loader gives Kedro that. Nodes receive the blocks typed, through Kedro's
typed parameters: a node argument annotated `rl: RLConfig` gets `params:rl` as an `RLConfig`
(`schema.Block` completes its nested blocks), so nodes and the library functions they call read
`rl.update.lr`, never `rl["update"]["lr"]`; every node annotates every block it reads (a test checks).
A new setting is one field (with its comment, which `docs/configuration.md` shows) in the block's dataclass.

The `domain` block's keys depend on its `name`: they are the constructor arguments of the domain
it picks, typed by the constructor's signature (`domains/registry.DomainConfig`).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Mapping

from rlvr_factory.audit import AuditConfig
from rlvr_factory.distributed import DistributedConfig
from rlvr_factory.domains.registry import DomainConfig, domain_factory
from rlvr_factory.models.lora import LoraSettings
from rlvr_factory.models.policy import DTYPES
from rlvr_factory.models.tiny import CopyWarmupConfig, TinyModelConfig
from rlvr_factory.domains.curation import TaskDecontaminationConfig
from rlvr_factory.preferences.sources import PreferencesConfig
from rlvr_factory.rollout.agent_loop import RolloutConfig
from rlvr_factory.rollout.dynamic import DynamicSampling
from rlvr_factory.rollout.engine import SamplingConfig
from rlvr_factory.schema import (
    Block, ConfigError, Fraction, NonNegativeInt, PositiveFloat, PositiveInt, Range, parse, to_dict,
)
from rlvr_factory.rl.preference import PREFERENCE_LOSSES
from rlvr_factory.training.domain_levels import CurriculumConfig
from rlvr_factory.training.grpo import UpdateConfig
from rlvr_factory.training.lm import SCHEDULES
from rlvr_factory.training.pairs import PairTrainConfig
from rlvr_factory.training.sft import SFTConfig
from rlvr_factory.verification import VerifyConfig


@dataclass(frozen=True)
class EmbeddedModelConfig:
    cache_dir: str = "data/06_models/base"  # where built base models are cached (one per configuration)
    seed: int = 0  # corpus and initialisation seed
    corpus_size: PositiveInt = 30000  # texts in the pre-training corpus (the domain's pretraining_corpus)
    architecture: TinyModelConfig = field(default_factory=TinyModelConfig)  # the tiny Llama's shape
    pretrain: SFTConfig = field(default_factory=SFTConfig)  # the pre-training loop (next-token loss on the corpus)
    copy_warmup: CopyWarmupConfig = field(default_factory=CopyWarmupConfig)  # synthetic copying before the corpus (steps 0: none)


@dataclass(frozen=True)
class ModelConfig(Block):
    name_or_path: str = "embedded"  # embedded (the built-in ~1M-parameter Llama) | a local HF model directory | a hub id
    device: str = "auto"  # auto (a GPU when there is one) | cpu | cuda | cuda:0 ...
    dtype: Literal[DTYPES] = "float32"  # weights' precision (auto: the checkpoint's own)
    chat_template: str | None = None  # null: the tokenizer's own | plain (prompt, newline, answer, EOS: for base models) | chatml | a Jinja template
    lora: LoraSettings = field(default_factory=LoraSettings)  # RL trains LoRA adapters through PEFT (Hu et al. 2021)
    embedded: EmbeddedModelConfig = field(default_factory=EmbeddedModelConfig)  # the embedded model (name_or_path: embedded)


@dataclass(frozen=True)
class DifficultyConfig:
    default: int = 1  # for tasks whose source gives no difficulty
    model: str | None = None  # an HF model directory: unlabelled tasks get a difficulty from its pass rate; null: off
    samples: PositiveInt = 4  # samples per task for the pass rate
    levels: PositiveInt = 4  # pass rate 1 -> difficulty 1 ... pass rate 0 -> difficulty `levels`
    seed: int = 0  # sampling seed
    sampling: SamplingConfig = field(default_factory=SamplingConfig)  # how the model samples


@dataclass(frozen=True)
class CurateConfig(Block):
    seed: int = 0  # validation carving and weighted mixing
    decontamination: TaskDecontaminationConfig = field(default_factory=TaskDecontaminationConfig)  # train vs eval prompts
    validation_from_train: NonNegativeInt = 100  # per domain whose sources have no validation split
    difficulty: DifficultyConfig = field(default_factory=DifficultyConfig)  # difficulty of unlabelled tasks
    audit: AuditConfig = field(default_factory=AuditConfig)  # the reward audit of every domain and family (rlvr audit)


@dataclass(frozen=True)
class SFTBlockConfig(Block):
    seed: int = 0  # which demonstrations answer directly
    num_examples: NonNegativeInt = 500  # demonstrations taken from the train split; 0: no SFT, the policy starts as the base model (a domain without demonstrations, e.g. verifiers)
    direct_answer_fraction: Fraction = 0.6  # share of demonstrations giving the answer alone instead of the worked solution
    tool_demonstration_fraction: Fraction = 0.0  # share showing a tool-using episode (the domain's tool_demonstration)
    action_loss: Literal["all", "last"] = "all"  # multi-turn demonstrations: loss on every action, or on the last alone (earlier ones, e.g. a deliberately wrong first edit, are context like observations)
    train: SFTConfig = field(default_factory=SFTConfig)  # the optimisation loop


@dataclass(frozen=True)
class RLConfig(Block):
    rounds: PositiveInt = 20  # rounds the round loop runs (round_000 ...); `--params=rl.rounds=2` runs exactly 2
    resume_from: NonNegativeInt = 0  # a killed run resumes at this round, one right after a checkpoint: kedro run --from-nodes=round.rollout --params=rl.resume_from=N
    seed: int = 0  # every round's seed derives from it
    lr_schedule: Literal[SCHEDULES] = "cosine"  # update.lr over the rounds: cosine (to 10%), linear (to 0) or constant
    checkpoint_every: NonNegativeInt = 5  # write the policy and optimizer to disk every N rounds (0: never)
    max_staleness: NonNegativeInt = 0  # asynchronous rounds: round k samples from the policy of round k - s (s at most this; 0 at a checkpoint), overlapping the updates in between under a ThreadRunner (docs/rl.md)
    validation_ahead_share: Fraction = 0.85  # asynchronous rounds: share of a round's validation tasks the background worker validates, behind the rollout ahead; the update validates the rest right after it trains (docs/engines.md)
    prompts_per_round: PositiveInt = 64  # train prompts (groups) per round
    samples_per_prompt: PositiveInt = 8  # G, the group size
    domain_curves_max: NonNegativeInt = 10  # per-domain MLflow curves up to this many domains; beyond, the table and heatmap
    sampling: SamplingConfig = field(default_factory=SamplingConfig)  # rollout sampling
    dynamic_sampling: DynamicSampling = field(default_factory=DynamicSampling)  # DAPO (Yu et al. 2025, Eq. 11)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)  # prompts chosen by online pass rate
    update: UpdateConfig = field(default_factory=UpdateConfig)  # the policy-gradient update


@dataclass(frozen=True)
class EvaluateConfig(Block):
    seed: int = 0  # sampling seed of pass@k
    k: PositiveInt = 8  # samples per task for pass@k
    validation_size: PositiveInt = 400  # validation tasks scored (greedy) after each round
    sampling: SamplingConfig = field(default_factory=SamplingConfig)  # evaluation sampling


@dataclass(frozen=True)
class RolloutSampleConfig:
    per_round: NonNegativeInt = 8  # rollouts drawn from every round's scored rollouts
    seed: int = 0  # which ones


@dataclass(frozen=True)
class PartViewsConfig:
    per_round: NonNegativeInt = 4  # CAD runs: pictures per round (first and last round), three views each


@dataclass(frozen=True)
class ReportConfig(Block):
    register_model: bool = True  # register the final policy in the MLflow Model Registry (it is always logged)
    registered_model_name: str = "rlvr-policy"  # its name in the Model Registry (each run adds a version)
    rollout_sample: RolloutSampleConfig = field(default_factory=RolloutSampleConfig)  # logged as report/rollout_sample.json
    part_views: PartViewsConfig = field(default_factory=PartViewsConfig)  # data/08_reporting/part_views/


@dataclass(frozen=True)
class DPOBlockConfig(Block):
    loss: Literal[PREFERENCE_LOSSES] = "dpo"  # dpo (Rafailov et al. 2023) | ipo (Azar et al. 2023)
    beta: PositiveFloat = 0.1  # KL anchor to the reference (IPO's tau)
    label_smoothing: Fraction = 0.0  # eps, the assumed share of flipped labels (conservative DPO); dpo only
    eval_batch_size: PositiveInt = 64  # pairs per forward pass when scoring held-out pairs
    checkpoint_dir: str = "data/06_models/checkpoints/dpo"  # resume point of a killed run
    train: PairTrainConfig = field(default_factory=PairTrainConfig)  # the optimisation loop


@dataclass(frozen=True)
class RewardModelBlockConfig(Block):
    backbone: str = "policy"  # policy: the SFT policy | an HF sequence-classification model (head: scalar) or causal LM (head: implicit)
    head: Literal["scalar", "implicit"] = "scalar"  # scalar: a fresh scalar head on the backbone | implicit: r = beta log(pi / pi_ref), pi trained from the backbone, pi_ref its frozen copy
    beta: PositiveFloat = 0.1  # head: implicit, the scale of the log-ratio reward
    seed: int = 0  # head initialisation
    use_margin: bool = False  # subtract each pair's margin from the reward gap (Llama 2); pairs without one use 0
    eval_batch_size: PositiveInt = 64  # pairs per forward pass when scoring held-out pairs
    drop_highest_loss: Annotated[float, Range(ge=0, lt=1)] = 0.0  # share of each batch's highest-loss pairs left out of the gradient (label noise; Han et al. 2018)
    checkpoint_dir: str = "data/06_models/checkpoints/reward_model"  # resume point of a killed run
    train: PairTrainConfig = field(default_factory=PairTrainConfig)  # the optimisation loop


@dataclass(frozen=True)
class Parameters:
    model: ModelConfig = field(default_factory=ModelConfig)  # the base model (parameters_base_model.yml)
    domain: DomainConfig = field(default_factory=DomainConfig)  # the task domain: `name` + its constructor's keys (domains/registry.py)
    curate: CurateConfig = field(default_factory=CurateConfig)  # task curation (parameters_curate.yml)
    sft: SFTBlockConfig = field(default_factory=SFTBlockConfig)  # supervised fine-tuning (parameters_sft.yml)
    rl: RLConfig = field(default_factory=RLConfig)  # RL rounds (parameters_rlvr.yml)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)  # episodes: turns, context, engine (parameters_rollout.yml)
    verify: VerifyConfig = field(default_factory=VerifyConfig)  # the verifier pool (parameters_verify.yml)
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)  # held-out evaluation (parameters_evaluate.yml)
    report: ReportConfig = field(default_factory=ReportConfig)  # MLflow record and registry (parameters_report.yml)
    preferences: PreferencesConfig = field(default_factory=PreferencesConfig)  # preference pairs (parameters_preference.yml)
    dpo: DPOBlockConfig = field(default_factory=DPOBlockConfig)  # DPO on the pairs (parameters_preference.yml)
    reward_model: RewardModelBlockConfig = field(default_factory=RewardModelBlockConfig)  # Bradley-Terry reward model
    distributed: DistributedConfig = field(default_factory=DistributedConfig)  # data-parallel under torchrun (parameters_distributed.yml)


def resolve(params: Mapping[str, Any]) -> dict[str, Any]:
    """The merged parameters checked against the tree, with every default filled in (plain dicts).

    Raises `ConfigError` naming the first key that is wrong (a top-level key too: a new block is
    a field of `Parameters`).
    """
    params = dict(params)
    rl = params.get("rl")
    if isinstance(rl, Mapping) and isinstance(rl.get("update"), Mapping):
        update = dict(rl["update"])
        if update.get("overlong_cache_length") and update.get("overlong_max_length") is None:
            # L_max of DAPO's overlong penalty defaults to the completion budget.
            budget = (rl.get("sampling") or {}).get("max_new_tokens", SamplingConfig.max_new_tokens)
            params["rl"] = {**rl, "update": {**update, "overlong_max_length": budget}}
    domain = params.get("domain") or {"name": "arithmetic"}
    if not isinstance(domain, Mapping):
        raise ConfigError("domain", f"expected a mapping with a `name`, got {domain!r}")
    params["domain"] = with_loop_turns(domain, parse(RolloutConfig, params.get("rollout"), "rollout").max_turns)
    return to_dict(parse(Parameters, params))


def with_loop_turns(domain: Mapping[str, Any], turns: int, key: str = "domain", named: bool = True) -> dict[str, Any]:
    """The domain block with the episode budget `turns` (`rollout.max_turns`) passed to every domain
    whose constructor takes `max_turns` (code_repair, cad; a mix's members too): one key sets the
    loop's budget and the environment's own, so the two cannot disagree. The domain block may not set it."""
    domain = dict(domain)
    if "max_turns" in domain:
        raise ConfigError(f"{key}.max_turns", "the episode budget is one key for the loop and the environment: "
                          f"set rollout.max_turns (it is passed to the domain), not {key}.max_turns")
    try:
        factory = domain_factory(domain.get("name"))
    except ValueError as e:
        raise ConfigError(f"{key}.name", str(e)) from e
    if getattr(factory, "name", None) == "mix" and isinstance(domain.get("domains"), Mapping):  # each member's block
        domain["domains"] = {
            member: with_loop_turns({"name": member, **block}, turns, f"{key}.domains.{member}", "name" in block)
            if isinstance(block, Mapping) else block for member, block in domain["domains"].items()}
    if "max_turns" in inspect.signature(factory).parameters:
        domain["max_turns"] = turns
    return domain if named else {k: v for k, v in domain.items() if k != "name"}

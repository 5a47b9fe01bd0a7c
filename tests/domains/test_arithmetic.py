"""The embedded arithmetic domain: step-by-step solutions, seeded disjoint splits, scoring."""

import pandas as pd
import pytest

from rlvr_factory.domains import DOMAINS, Task, get_domain, references_of, tasks_from_frame, tasks_to_frame
from rlvr_factory.domains.arithmetic import ArithmeticDomain, Level, solve_steps
from rlvr_factory.domains.base import TASK_COLUMNS, Score

LEVELS = {1: {"digits": 1, "operands": 2, "ops": "+-"}, 2: {"digits": 2, "operands": 3, "ops": "+-*"}}
SPLITS = {"train": 40, "validation": 10, "test": 12}


def make_domain(seed=0, levels=LEVELS, splits=SPLITS):
    return ArithmeticDomain(levels=levels, splits=splits, seed=seed)


def expression_of(task: Task) -> str:
    assert task.prompt.startswith("Compute ")
    return task.prompt[len("Compute ") :]


# solve_steps


def test_multiplication_is_reduced_before_addition():
    assert solve_steps([3, 4, 5], ["+", "*"]) == (["4*5=20", "3+20=23"], 23)


def test_without_multiplication_operations_reduce_left_to_right():
    assert solve_steps([10, 3, 2], ["-", "-"]) == (["10-3=7", "7-2=5"], 5)


def test_several_multiplications_go_left_to_right_before_the_rest():
    steps, value = solve_steps([2, 3, 4, 5, 6], ["*", "-", "*", "+"])
    assert steps == ["2*3=6", "4*5=20", "6-20=-14", "-14+6=-8"]
    assert value == 2 * 3 - 4 * 5 + 6


def test_a_single_number_has_no_steps():
    assert solve_steps([7], []) == ([], 7)


def test_solve_steps_does_not_mutate_its_arguments():
    numbers, ops = [1, 2, 3], ["*", "+"]
    solve_steps(numbers, ops)
    assert numbers == [1, 2, 3] and ops == ["*", "+"]


# Level


@pytest.mark.parametrize(
    "kwargs", [{"digits": 0, "operands": 2, "ops": "+"}, {"digits": 1, "operands": 1, "ops": "+"}]
)
def test_a_level_needs_at_least_one_digit_and_two_operands(kwargs):
    with pytest.raises(ValueError, match="digits >= 1 and operands >= 2"):
        Level(**kwargs)


@pytest.mark.parametrize("ops", ["", "+/", "^"])
def test_a_level_needs_a_non_empty_subset_of_the_known_operators(ops):
    with pytest.raises(ValueError, match="ops must be"):
        Level(digits=1, operands=2, ops=ops)


# generate_tasks


def test_split_sizes_are_honoured():
    tasks = make_domain().generate_tasks()
    counts = {split: sum(t.split == split for t in tasks) for split in SPLITS}
    assert counts == SPLITS


def test_the_same_seed_gives_the_same_tasks():
    assert make_domain(seed=3).generate_tasks() == make_domain(seed=3).generate_tasks()


def test_another_seed_gives_other_tasks():
    first = [t.prompt for t in make_domain(seed=3).generate_tasks()]
    second = [t.prompt for t in make_domain(seed=4).generate_tasks()]
    assert first != second


def test_no_expression_appears_twice_within_or_across_splits():
    tasks = make_domain().generate_tasks()
    prompts = [t.prompt for t in tasks]
    assert len(set(prompts)) == len(prompts)


def test_task_ids_are_unique():
    tasks = make_domain().generate_tasks()
    assert len({t.task_id for t in tasks}) == len(tasks)


def test_answers_equal_python_evaluation_of_the_expression():
    for task in make_domain().generate_tasks():
        assert task.reference["answer"] == str(eval(expression_of(task)))  # noqa: S307 - digits and +-* only


def test_expressions_follow_their_level():
    tasks = make_domain().generate_tasks()
    for task in tasks:
        expression = expression_of(task)
        numbers = expression.replace("+", " ").replace("-", " ").replace("*", " ").split()
        ops = [c for c in expression if c in "+-*"]
        level = LEVELS[task.difficulty]
        assert len(numbers) == level["operands"]
        assert all(len(n) <= level["digits"] for n in numbers)
        assert set(ops) <= set(level["ops"])


def test_difficulties_alternate_in_equal_shares_within_each_split():
    tasks = make_domain().generate_tasks()
    for split in SPLITS:
        labels = [t.difficulty for t in tasks if t.split == split]
        assert labels[:4] == [1, 2, 1, 2]
        assert abs(labels.count(1) - labels.count(2)) <= 1
    assert {t.difficulty for t in tasks} == {1, 2}


def test_tasks_carry_their_domain_and_the_seed_as_source():
    task = make_domain(seed=9).generate_tasks()[0]
    assert task.domain == "arithmetic"
    assert task.source == "generated:seed=9"


def test_string_level_keys_are_read_as_integers():
    domain = make_domain(levels={"3": {"digits": 1, "operands": 2, "ops": "+"}}, splits={"train": 5})
    assert {t.difficulty for t in domain.generate_tasks()} == {3}


def test_a_level_too_small_for_the_requested_tasks_raises():
    # one-digit additions a+b: 100 distinct expressions, at most half of which may be requested
    domain = make_domain(levels={1: {"digits": 1, "operands": 2, "ops": "+"}}, splits={"train": 40, "test": 11})
    with pytest.raises(ValueError, match="level 1 .* too few distinct expressions for 51 tasks"):
        domain.generate_tasks()


def test_a_level_with_just_enough_expressions_generates():
    domain = make_domain(levels={1: {"digits": 1, "operands": 2, "ops": "+"}}, splits={"train": 40, "test": 10})
    assert len(domain.generate_tasks()) == 50


# demonstration and score


def test_every_demonstration_scores_as_correct():
    domain = make_domain()
    for task in domain.generate_tasks():
        score = domain.score(domain.demonstration(task), task.reference)
        assert score.correct and score.reward == 1.0


def test_a_demonstration_lists_the_steps_then_the_boxed_answer():
    domain = make_domain()
    task = Task("t", "arithmetic", "Compute 3+4*5", {"answer": "23", "steps": ["4*5=20", "3+20=23"]}, 1, "train", "x")
    assert domain.demonstration(task) == "4*5=20\n3+20=23\n\\boxed{23}"


def test_an_answer_only_demonstration_is_the_boxed_answer_and_scores_as_correct():
    domain = make_domain()
    task = domain.generate_tasks()[0]
    demonstration = domain.demonstration(task, worked=False)
    assert demonstration == f"\\boxed{{{task.reference['answer']}}}"
    assert domain.score(demonstration, task.reference).correct


def test_a_wrong_final_answer_scores_as_incorrect():
    domain = make_domain()
    score = domain.score("4*5=20\n3+20=23\n\\boxed{24}", {"answer": "23", "steps": []})
    assert isinstance(score, Score)
    assert not score.correct and score.reward == 0.0


# pretraining_corpus


def test_the_pretraining_corpus_has_the_requested_size_and_format():
    corpus = make_domain().pretraining_corpus(size=30, seed=1, exclude=set())
    assert len(corpus) == 30
    for text in corpus:
        lines = text.split("\n")
        assert lines[0].startswith("Compute ")
        expected = str(eval(lines[0][len("Compute ") :]))  # noqa: S307
        assert lines[-1] == f"\\boxed{{{expected}}}"


def test_the_pretraining_corpus_never_contains_an_excluded_prompt():
    domain = make_domain(levels={1: {"digits": 1, "operands": 2, "ops": "+"}}, splits={"test": 50})
    held_out = {t.prompt for t in domain.generate_tasks()}
    corpus = domain.pretraining_corpus(size=300, seed=5, exclude=held_out)
    prompts = {text.split("\n")[0] for text in corpus}
    assert len(corpus) == 300
    assert not prompts & held_out
    # without the exclusion, such a draw does contain held-out prompts
    unfiltered = {text.split("\n")[0] for text in domain.pretraining_corpus(size=300, seed=5, exclude=set())}
    assert unfiltered & held_out


def test_the_pretraining_corpus_is_deterministic_for_a_seed():
    domain = make_domain()
    assert domain.pretraining_corpus(20, 2, set()) == domain.pretraining_corpus(20, 2, set())
    assert domain.pretraining_corpus(20, 2, set()) != domain.pretraining_corpus(20, 3, set())


# tasks table round trip


def test_tasks_survive_a_round_trip_through_a_frame():
    tasks = make_domain().generate_tasks()
    frame = tasks_to_frame(tasks)
    assert list(frame.columns) == TASK_COLUMNS
    assert isinstance(frame.loc[0, "reference"], str)
    assert tasks_from_frame(frame) == tasks


def test_an_empty_task_list_gives_an_empty_frame_with_the_contract_columns():
    frame = tasks_to_frame([])
    assert list(frame.columns) == TASK_COLUMNS and len(frame) == 0
    assert tasks_from_frame(frame) == []


def test_reading_a_frame_without_contract_columns_names_the_missing_ones():
    frame = tasks_to_frame(make_domain().generate_tasks()[:2]).drop(columns=["reference", "split"])
    with pytest.raises(ValueError, match=r"lacks columns \['reference', 'split'\]"):
        tasks_from_frame(frame)


def test_tasks_from_frame_restores_python_types():
    frame = pd.DataFrame(
        [{"task_id": 1, "domain": "d", "prompt": "p", "reference": '{"answer": "2"}', "difficulty": "3",
          "split": "test", "source": "s"}]
    )
    (task,) = tasks_from_frame(frame)
    assert task.task_id == "1" and task.difficulty == 3 and task.reference == {"answer": "2"}


def test_references_of_decodes_the_named_tasks_references_in_order_with_repeats():
    tasks = make_domain().generate_tasks()[:6]
    frame = tasks_to_frame(tasks)
    ids = [tasks[4].task_id, tasks[1].task_id, tasks[4].task_id]
    assert references_of(frame, pd.Series(ids)) == [tasks[4].reference, tasks[1].reference, tasks[4].reference]
    with pytest.raises(KeyError, match="not in the tasks table"):
        references_of(frame, ["no-such-task"])


# get_domain


def test_get_domain_builds_a_domain_from_its_parameters():
    domain = get_domain({"name": "arithmetic", "levels": LEVELS, "splits": {"train": 4}, "seed": 1})
    assert isinstance(domain, ArithmeticDomain)
    assert domain.seed == 1 and domain.splits == {"train": 4}


def test_get_domain_rejects_an_unknown_name_and_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown domain 'chess'; known domains: \['arithmetic', "):
        get_domain({"name": "chess"})
    assert "arithmetic" in DOMAINS


@pytest.mark.parametrize("reference", [{"answer": ["2", "3"]}, {"answer": 2}, {"answer": None}, {"steps": []}, ["2"], None,
                                       {"answer": {"a": [[["2"]]]}}])
def test_a_reference_without_a_string_answer_is_a_value_error(reference):
    with pytest.raises(ValueError, match="a reference needs 'answer', a string"):
        ArithmeticDomain.gold(reference)

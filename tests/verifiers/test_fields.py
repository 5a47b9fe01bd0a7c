"""The structured-extraction verifier: normalisation, per-field credit, cross-checks, near misses."""

import json
import time
from decimal import Decimal

import pytest

from rlvr_factory.verifiers.fields import (
    FieldsVerifier, field_credit, find_json_object, make_gold, normalise_currency, normalise_date, parse_amount,
    parse_rate,
)

INVOICE = make_gold(
    {"invoice_number": "id", "date": "date", "currency": "currency", "subtotal": "amount", "tax_rate": "rate",
     "tax": "amount", "total": "amount"},
    {"invoice_number": "INV-1042", "date": "2024-03-05", "currency": "EUR", "subtotal": "1234.50", "tax_rate": "20%",
     "tax": "246.90", "total": "1481.40"},
    currency="EUR",
)
RIGHT = {"invoice_number": "INV-1042", "date": "2024-03-05", "currency": "EUR", "subtotal": 1234.5,
         "tax_rate": "20%", "tax": 246.9, "total": 1481.4}
VERIFIER = FieldsVerifier()


def score(answer, gold=INVOICE):
    text = answer if isinstance(answer, str) else json.dumps(answer)
    return VERIFIER.score(text, gold)


# normalisation


@pytest.mark.parametrize("text", ["2024-03-05", "05.03.2024", "5 Mar 2024", "5th March 2024", "March 5, 2024",
                                  "mar 5 2024", "2024/03/05", " 2024-3-5 "])
def test_dates_in_any_customary_spelling_normalise_to_iso(text):
    assert normalise_date(text) == "2024-03-05"


def test_slash_dates_are_read_only_when_day_and_month_cannot_be_confused():
    assert normalise_date("25/03/2024") == "2024-03-25"
    assert normalise_date("03/25/2024") == "2024-03-25"
    assert normalise_date("05/03/2024") is None  # 5 March or May 3: ambiguous, never a match


@pytest.mark.parametrize("text", ["2024-02-30", "Smarch 5, 2024", "yesterday", ""])
def test_impossible_or_unreadable_dates_do_not_normalise(text):
    assert normalise_date(text) is None


@pytest.mark.parametrize(
    "text,amount,currency",
    [("$1,234.50", "1234.50", "USD"), ("1.234,50 €", "1234.50", "EUR"), ("EUR 1 234,50", "1234.50", "EUR"),
     ("CHF 1'234.50", "1234.50", "CHF"), ("£12", "12", "GBP"), ("(12.00)", "-12.00", None),
     ("-12.5", "-12.5", None), ("1,234", "1234", None), (1234.5, "1234.5", None), ("12,5", "12.5", None)],
)
def test_amounts_parse_across_locales_with_the_currency_they_name(text, amount, currency):
    assert parse_amount(text) == (Decimal(amount), currency)


@pytest.mark.parametrize("text", ["twelve", "$", "1.2.3,4,5x", "USD 12 EUR", True, None])
def test_unreadable_amounts_parse_to_none(text):
    assert parse_amount(text)[0] is None


@pytest.mark.parametrize("text,code", [("$", "USD"), ("usd", "USD"), (" Euro ", "EUR"), ("£", "GBP"),
                                       ("chf", "CHF"), ("sek", "SEK"), ("money", None)])
def test_currencies_normalise_to_iso_codes(text, code):
    assert normalise_currency(text) == code


@pytest.mark.parametrize("text", ["20%", "20 %", "0.2", "20", 0.2, 20])
def test_rates_normalise_to_fractions(text):
    assert parse_rate(text) == Decimal("0.2")


def test_text_fields_ignore_case_whitespace_and_trailing_punctuation():
    assert field_credit("text", "  blue   FOX llc.", "Blue Fox LLC") == 1.0
    assert field_credit("text", "Blue Fox", "Blue Fox LLC") == 0.0


# the answer's JSON


def test_the_json_object_is_found_in_prose_or_a_fence():
    assert find_json_object('Sure! {"total": 3} hope it helps') == {"total": 3}
    assert find_json_object('```json\n{"total": 3}\n```') == {"total": 3}
    assert find_json_object('{not json} then {"a": {"b": 1}}') == {"a": {"b": 1}}
    assert find_json_object("[1, 2]") is None


def test_no_json_object_scores_zero_with_format_zero():
    verdict = score("the total is 1481.40")
    assert verdict.reward == 0.0 and not verdict.correct and verdict.breakdown["format"] == 0.0


# whole verdicts


def test_the_right_answer_in_other_spellings_scores_one():
    verdict = score({"invoice_number": " inv-1042 ", "date": "5 March 2024", "currency": "€", "subtotal": "1.234,50 €",
                     "tax_rate": 0.2, "tax": "EUR 246.90", "total": "€1,481.40"})
    assert verdict.reward == 1.0 and verdict.correct and verdict.status == "ok"
    assert verdict.breakdown["check.total_is_subtotal_plus_tax"] == 1.0
    assert verdict.breakdown["check.tax_is_rate_times_subtotal"] == 1.0


def test_each_field_gets_its_own_partial_credit():
    verdict = score({**RIGHT, "date": "2024-05-03"})
    assert verdict.breakdown["field.date"] == 0.0 and verdict.breakdown["field.total"] == 1.0
    assert verdict.reward == pytest.approx(6 / 7) and not verdict.correct


@pytest.mark.parametrize(
    "near_miss",
    [
        {"total": 1481.41},  # one cent off (and total != subtotal + tax)
        {"total": "$1,481.40"},  # right number, wrong currency
        {"date": "03.05.2024"},  # day and month swapped
        {"date": "05/03/2024"},  # ambiguous spelling
        {"tax_rate": "2%"},
        {"invoice_number": "INV-1043"},
        {"currency": "USD"},
    ],
)
def test_near_misses_score_below_one(near_miss):
    verdict = score({**RIGHT, **near_miss})
    assert 0.0 < verdict.reward < 1.0 and not verdict.correct


def test_a_missing_field_loses_its_credit_and_shows_in_the_schema_share():
    answer = dict(RIGHT)
    del answer["tax_rate"]
    verdict = score(answer)
    assert verdict.breakdown["field.tax_rate"] == 0.0 and verdict.breakdown["schema"] == pytest.approx(6 / 7)
    assert verdict.reward == pytest.approx(6 / 7)


def test_fields_that_were_not_asked_for_are_penalised():
    verdict = score({**RIGHT, "vendor": "Acme", "notes": "x"})
    assert verdict.breakdown["extra_fields"] == 2.0
    assert verdict.reward == pytest.approx(1.0 - 2 * 0.1) and not verdict.correct


def test_an_internally_inconsistent_answer_loses_more_than_its_wrong_field():
    gold = make_gold({"subtotal": "amount", "tax": "amount", "total": "amount"},
                     {"subtotal": "100.00", "tax": "10.00", "total": "110.00"})
    consistent = score({"subtotal": 100, "tax": 11, "total": 111}, gold)
    inconsistent = score({"subtotal": 100, "tax": 11, "total": 110}, gold)
    assert consistent.breakdown["check.total_is_subtotal_plus_tax"] == 1.0
    assert inconsistent.breakdown["check.total_is_subtotal_plus_tax"] == 0.0
    assert consistent.reward == pytest.approx(1 / 3)
    assert inconsistent.reward == pytest.approx(2 / 3 - 0.25)


def test_line_items_get_partial_credit_and_must_sum_to_the_subtotal():
    gold = make_gold({"line_items": "items", "subtotal": "amount"},
                     {"line_items": ["10.00", "20.50"], "subtotal": "30.50"})
    assert score({"line_items": [10, 20.5], "subtotal": 30.5}, gold).correct
    wrong_item = score({"line_items": [10, 20.0], "subtotal": 30.5}, gold)
    assert wrong_item.breakdown["field.line_items"] == 0.5
    assert wrong_item.breakdown["check.items_sum_to_subtotal"] == 0.0
    assert score({"line_items": [{"amount": "10.00"}, {"amount": "20.50"}], "subtotal": "30.50"}, gold).correct


def test_balance_and_income_relations_are_cross_checked():
    statement = make_gold({"opening_balance": "amount", "total_credits": "amount", "total_debits": "amount",
                           "closing_balance": "amount"},
                          {"opening_balance": "100", "total_credits": "50", "total_debits": "30", "closing_balance": "120"})
    assert score({"opening_balance": 100, "total_credits": 50, "total_debits": 30, "closing_balance": 120},
                 statement).breakdown["check.closing_is_opening_plus_credits_minus_debits"] == 1.0
    report = make_gold({"revenue": "amount", "expenses": "amount", "net_income": "amount"},
                       {"revenue": "10", "expenses": "4", "net_income": "6"})
    verdict = score({"revenue": 10, "expenses": 4, "net_income": 7}, report)
    assert verdict.breakdown["check.net_income_is_revenue_minus_expenses"] == 0.0
    assert verdict.reward == pytest.approx(2 / 3 - 0.25)


def test_quick_score_is_the_full_verdict_and_oversize_input_is_an_error():
    assert VERIFIER.quick_score(json.dumps(RIGHT), INVOICE) == score(RIGHT)
    assert FieldsVerifier(max_completion_chars=10).score(json.dumps(RIGHT), INVOICE).status == "error"


def test_a_gold_with_an_unknown_type_or_a_missing_value_is_refused():
    with pytest.raises(ValueError, match="unknown types"):
        make_gold({"total": "money"}, {"total": "1"})
    with pytest.raises(ValueError, match="without a value"):
        make_gold({"total": "amount"}, {})


# red team: inputs that crashed or hung the verifier, and ambiguous answers that earned credit

TAXED = make_gold({"subtotal": "amount", "tax_rate": "rate", "tax": "amount", "total": "amount"},
                  {"subtotal": "100.00", "tax_rate": "20%", "tax": "20.00", "total": "120.00"})
TAXED_RIGHT = '{"subtotal": 100, "tax_rate": "20%", "tax": 20, "total": 120}'


@pytest.mark.parametrize("completion", [
    '{"subtotal": NaN, "tax_rate": NaN, "tax": NaN, "total": NaN}',
    '{"subtotal": Infinity, "tax_rate": 0.2, "tax": -Infinity, "total": Infinity}',
    '{"subtotal": 1e400, "tax_rate": 1e-400, "tax": 1e999999, "total": 120}',
    '{"subtotal": ' + "9" * 50 + ', "tax_rate": 0.2, "tax": ' + "9" * 49 + ', "total": ' + "1" * 50 + '}',
    '{"subtotal": "' + "9" * 50 + '", "tax_rate": "' + "9" * 50 + '%", "tax": "1e5", "total": "1' + ",000" * 40 + '"}',
    '{"subtotal": ' + "7" * 5000 + ', "tax": 20, "total": 120}',
    '{"subtotal": ' + "[" * 9000 + "]" * 9000 + "}",
    '{"subtotal": ' + '{"a": ' * 2500 + "1" + "}" * 2500 + "}",
    '{"subtotal": [100, {"x": null}], "tax_rate": {"r": 1}, "tax": [], "total": true}',
    '{"line_items": [NaN, 1e400, {"amount": Infinity}], "subtotal": NaN}',
])
def test_any_json_like_answer_gets_a_score_with_a_status(completion):
    verdict = VERIFIER.score(completion, TAXED)
    assert verdict.status == "ok" and 0.0 <= verdict.reward < 1.0 and not verdict.correct


@pytest.mark.parametrize("gold", ["not json", "{}", '{"schema": {"a": "amount"}}', '{"schema": [], "values": 3}',
                                  '{"schema": {"a": "money"}, "values": {"a": 1}}'])
def test_a_malformed_gold_is_an_error_with_a_message_not_an_exception(gold):
    verdict = VERIFIER.score(TAXED_RIGHT, gold)
    assert verdict.status == "error" and verdict.message and verdict.reward == 0.0


@pytest.mark.parametrize("completion", [
    '{"subtotal": 100, "tax_rate": "20%", "tax": 20, "total": 999, "total": 120}',  # json.loads keeps the last
    '{"subtotal": 100, "tax_rate": "20%", "tax": 20, "total": 120, "total": "120.00", "total": 7}',
    '```json\n' + TAXED_RIGHT + '\n```\nor, if not,\n```json\n{"subtotal": 100, "tax_rate": "10%", "tax": 10, '
    '"total": 110}\n```',
    TAXED_RIGHT + ' or ' + TAXED_RIGHT.replace("120", "121"),
    '{"subtotal": 1} ' + TAXED_RIGHT,  # the first object was the only one looked at, or the fenced one
])
def test_ambiguous_answers_earn_nothing(completion):
    verdict = VERIFIER.score(completion, TAXED)
    assert verdict.reward == 0.0 and not verdict.correct and verdict.breakdown["ambiguous"] == 1.0


def test_the_same_answer_twice_or_a_repeated_key_with_the_same_value_is_not_ambiguous():
    assert VERIFIER.score(TAXED_RIGHT + "\n```json\n" + TAXED_RIGHT + "\n```", TAXED).correct
    assert VERIFIER.score(TAXED_RIGHT.replace('"total": 120', '"total": 120, "total": 120'), TAXED).correct


@pytest.mark.parametrize("completion", [
    "{" * 20_000,
    '{"a": ' * 3300,
    "{" + '"x": "' * 3300,
    "[" * 20_000,
    '{"a": "' + "\\\\" * 9000 + '"}' * 200,
    " " * 19_000 + "{" + " " * 900 + "}",
    "{}" * 10_000,
])
def test_pathological_completions_are_judged_in_bounded_time(completion):
    started = time.perf_counter()
    verdict = VERIFIER.score(completion, TAXED)
    assert time.perf_counter() - started < 0.5 and verdict.status == "ok" and not verdict.correct


def _gold_json(values: str, schema: str = '{"total": "amount"}') -> str:
    return '{"schema": ' + schema + ', "values": ' + values + ', "currency": null}'


@pytest.mark.parametrize(("gold", "says"), [
    (_gold_json('{"total": NaN}'), "not a readable amount"),
    (_gold_json('{"total": Infinity}'), "not a readable amount"),
    (_gold_json('{"total": 1e999999}'), "not a readable amount"),
    (_gold_json('{"total": "' + "9" * 100_000 + '"}'), "not a readable amount"),
    (_gold_json('{"total": ' + "9" * 100_000 + "}"), "ValueError"),  # JSON refuses to read the integer
    (_gold_json('{"total": ' + "9" * 4000 + "}"), "not a readable amount"),
    (_gold_json('{"rate": NaN}', '{"rate": "rate"}'), "not a readable rate"),
    (_gold_json('{"line_items": ["1"] }'.replace('["1"]', json.dumps(["1"] * 20_000)), '{"line_items": "items"}'),
     "not a readable items"),
])
def test_a_gold_with_an_unreadable_amount_is_an_error_in_bounded_time(gold, says):
    started = time.perf_counter()
    verdict = FieldsVerifier(max_completion_chars=200_000).score('{"total": 1, "line_items": ' + json.dumps(
        [str(i) for i in range(2000)]) + "}", gold)
    assert time.perf_counter() - started < 1.0
    assert verdict.status == "error" and says in verdict.message and verdict.reward == 0.0


def test_a_long_list_of_line_items_is_judged_in_bounded_time():
    gold = make_gold({"line_items": "items"}, {"line_items": [f"{i}.00" for i in range(200)]})
    started = time.perf_counter()
    verdict = FieldsVerifier(max_completion_chars=10**6).score(json.dumps({"line_items": ["0.5"] * 50_000}), gold)
    assert time.perf_counter() - started < 1.0 and verdict.status == "ok" and verdict.reward == 0.0


@pytest.mark.parametrize("gold", [None, ["x"], 7, {"schema": {}}])
def test_a_gold_or_completion_that_is_not_a_string_is_an_error(gold):
    assert VERIFIER.score(TAXED_RIGHT, gold).status == "error"
    assert VERIFIER.score(gold, TAXED).status == "error"


@pytest.mark.parametrize("predicted, credit", [("26.241", 0.0), ("26.239", 0.0), ("26.2449", 0.0), ("26.240", 1.0),
                                               ("$26.24", 1.0), (26.24, 1.0)])
def test_an_amount_is_compared_exactly_not_within_half_a_cent(predicted, credit):
    """The reward audit's rounding attack: 26.241 for a document's 26.24 was paid within half a cent."""
    assert field_credit("amount", predicted, "26.24", "USD") == credit


@pytest.mark.parametrize("predicted, credit", [("7.5%", 1.0), ("0.075", 1.0), ("7.50004%", 0.0), ("0.07504", 0.0)])
def test_a_rate_is_compared_exactly(predicted, credit):
    assert field_credit("rate", predicted, "7.5%") == credit

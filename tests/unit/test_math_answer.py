r"""Extraction, normalisation, verification and reasoning split for AIME-style \boxed{} answers."""

from __future__ import annotations

import pytest

from evalkit.scoring import math_answer
from evalkit.scoring.math_answer import (
    Extraction,
    canonical_answer,
    extract_boxed,
    normalize_integer,
    score_answer,
    verify,
)
from evalkit.scoring.reasoning import split_reasoning


def case(cid, content, gold, status, extracted, correct, how, reasoning=None, finish="stop"):
    """One realistic model output: the message content (and the server's reasoning field) with its verdict."""
    return (cid, content, reasoning, finish, gold, status, extracted, correct, how)


# case(id, content, gold, expected status, extracted, correct, how, reasoning=..., finish=...)
# The content/reasoning pair goes through split_reasoning, and only the answer text is scored.
# fmt: off
CASES = [
    case("boxed_in_dollars", r"So the sum is $\boxed{70}$.", "70", "ok", "70", True, "boxed/integer"),
    case("bare_boxed", r"\boxed{588}", "588", "ok", "588", True, "boxed/integer"),
    case("dollar_box_gold588", r"$\boxed{588}$", "588", "ok", "588", True, "boxed/integer"),
    case("inner_spaces", r"\boxed{ 588 }", "588", "ok", "588", True, "boxed/integer"),
    case("space_before_brace", r"Answer: \boxed {70}", "70", "ok", "70", True, "boxed/integer"),
    case("unbraced_dollar", r"Therefore $\boxed 70$.", "70", "ok", "70", True, "boxed_unbraced/integer"),
    case("unbraced_eol", "The answer is \\boxed 70\nDone.", "70", "ok", "70", True, "boxed_unbraced/integer"),
    case("fbox", r"\fbox{16}", "16", "ok", "16", True, "fbox/integer"),
    case("fbox_after_boxed", r"\boxed{15} no wait \fbox{16}", "16", "ok", "16", True, "fbox/integer"),
    case("leading_zero", r"\boxed{070}", "70", "ok", "070", True, "boxed/integer"),
    case("zero", r"\boxed{000}", "0", "ok", "000", True, "boxed/integer"),
    case("text_wrapper", r"\boxed{\text{70}}", "70", "ok", r"\text{70}", True, "boxed/integer"),
    case("textbf_wrapper", r"\boxed{\textbf{70}}", "70", "ok", r"\textbf{70}", True, "boxed/integer"),
    case("mathrm_wrapper", r"\boxed{\mathrm{70}}", "70", "ok", r"\mathrm{70}", True, "boxed/integer"),
    case("degrees", r"\boxed{70^\circ}", "70", "ok", r"70^\circ", True, "boxed/integer"),
    case("degrees_braced", r"\boxed{70^{\circ}}", "70", "ok", r"70^{\circ}", True, "boxed/integer"),
    case("percent", r"\boxed{70\%}", "70", "ok", r"70\%", True, "boxed/integer"),
    case("dollar_sign", r"\boxed{\$70}", "70", "ok", r"\$70", True, "boxed/integer"),
    case("trailing_period", r"\boxed{70.}", "70", "ok", "70.", True, "boxed/integer"),
    case("decimal_zero", r"\boxed{70.0}", "70", "ok", "70.0", True, "boxed/integer"),
    case("thousands_comma", r"\boxed{1,000}", "1000", "ok", "1,000", True, "boxed/integer"),
    case("thousands_brace", r"\boxed{1{,}000}", "1000", "ok", "1{,}000", True, "boxed/integer"),
    case("thousands_thin", r"\boxed{1\,000}", "1000", "ok", r"1\,000", True, "boxed/integer"),
    case("negative", r"\boxed{-70}", "70", "ok", "-70", False, "boxed/integer"),
    case("wrong", r"The answer is \boxed{69}.", "70", "ok", "69", False, "boxed/integer"),
    case("dfrac", r"\boxed{\dfrac{140}{2}}", "70", "ok", r"\dfrac{140}{2}", True, "boxed/math_verify"),
    case("nested_frac_wrong", r"\boxed{\frac{1}{2}}", "70", "ok", r"\frac{1}{2}", False, "boxed/math_verify"),
    case("expression", r"\boxed{2^{3}+62}", "70", "ok", "2^{3}+62", True, "boxed/math_verify"),
    case("equation", r"\boxed{b = 70}", "70", "ok", "b = 70", True, "boxed/math_verify"),
    case("letter", r"\boxed{A}", "70", "ok", "A", False, "boxed/math_verify"),
    case("last_box_wins", r"First \boxed{69}, then \boxed{70}.", "70", "ok", "70", True, "boxed/integer"),
    case("last_box_wrong", r"\boxed{70}. Hmm, no: \boxed{71}", "70", "ok", "71", False, "boxed/integer"),
    case("nested_boxed", r"\boxed{\boxed{70}}", "70", "ok", "70", True, "boxed/integer"),
    case("empty_box_echo", r"\boxed{70} (in \boxed{} as asked)", "70", "ok", "70", True, "boxed/integer"),
    case("display_math", "**Final Answer**\n\\[\n\\boxed{204}\n\\]",
         "204", "ok", "204", True, "boxed/integer"),
    case("no_box", "The answer is 70.", "70", "no_answer", None, False, "none"),
    case("only_empty_box", r"\boxed{}", "70", "no_answer", None, False, "none"),
    case("empty_string", "", "70", "no_answer", None, False, "none"),
    case("none_content", None, "70", "no_answer", None, False, "none"),
    case("think_tags", "<think>maybe \\boxed{69}</think>\nSo \\boxed{70}.",
         "70", "ok", "70", True, "boxed/integer"),
    case("box_only_in_think", r"<think>it is \boxed{70}</think>I am not sure.",
         "70", "no_answer", None, False, "none"),
    case("missing_open_think", "compute... \\boxed{69}?\n</think>\n\n**Answer**: \\boxed{70}",
         "70", "ok", "70", True, "boxed/integer"),
    case("think_closed_no_answer", r"long thought \boxed{70}</think>",
         "70", "no_answer", None, False, "none"),
    case("unclosed_think_truncated", r"<think>so far \boxed{70} and then",
         "70", "truncated", None, False, "none", finish="length"),
    case("reasoning_field_ignored", r"\boxed{70}",
         "70", "ok", "70", True, "boxed/integer", reasoning=r"I think \boxed{71}"),
    case("reasoning_only", None, "70", "no_answer", None, False, "none", reasoning=r"thinking \boxed{70}"),
    case("reasoning_only_truncated", None,
         "70", "truncated", None, False, "none", reasoning="thinking and thinking", finish="length"),
    case("truncated_after_answer", r"\boxed{70}. Let me double check: the sum is",
         "70", "truncated", "70", True, "boxed/integer", finish="length"),
    case("truncated_inside_box", r"So the answer is \boxed{7",
         "70", "truncated", None, False, "none", finish="length"),
    case("truncated_box_falls_back", r"\boxed{69} ... so \boxed{7",
         "70", "truncated", "69", False, "boxed/integer", finish="length"),
    case("unicode_minus", "\\boxed{\u221270}", "-70", "ok", "\u221270", True, "boxed/integer"),
]


def test_case_table_is_large_and_unique():
    assert len(CASES) >= 40
    assert len({c[0] for c in CASES}) == len(CASES)


# ---------------------------------------------------------------------------------------------- extraction


@pytest.mark.parametrize(
    ("text", "value", "method"),
    [
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}", "boxed"),
        (r"\boxed{\left\{1, 2\right\}}", r"\left\{1, 2\right\}", "boxed"),
        (r"\boxed{{70}}", "{70}", "boxed"),
        (r"\fbox{16}", "16", "fbox"),
        (r"\boxed 588$ and more", "588", "boxed_unbraced"),
        (r"\boxed70", None, "none"),  # not an argument lighteval recognises
        (r"\boxedx{70}", None, "none"),  # another command
        (r"\boxed{7", None, "none"),
        ("no box here", None, "none"),
        ("", None, "none"),
        (None, None, "none"),
    ],
)
def test_extract_boxed(text, value, method):
    assert extract_boxed(text) == Extraction(value, method)


# --------------------------------------------------------------------------------------------- normalising


@pytest.mark.parametrize(
    ("s", "n"),
    [
        ("70", 70),
        ("070", 70),
        (" 70 ", 70),
        ("$70$", 70),
        (r"\(70\)", 70),
        (r"\text{70}", 70),
        (r"\text{ 70 }", 70),
        (r"\mathrm{70}", 70),
        (r"\textbf{70}", 70),
        (r"\mathbf{\text{70}}", 70),
        ("1,000", 1000),
        ("12,345,678", 12345678),
        ("1{,}000", 1000),
        (r"1\,000", 1000),
        (r"1\!000", 1000),
        ("70.", 70),
        ("70.00", 70),
        (r"70^\circ", 70),
        (r"70^{\circ}", 70),
        ("70°", 70),
        (r"70\%", 70),
        ("{70}", 70),
        ("+70", 70),
        ("-5", -5),
        ("1,2", None),
        ("1,00", None),
        ("70.5", None),
        (r"\frac{1}{2}", None),
        (r"\dfrac{140}{2}", None),
        ("2^{3}+1", None),
        ("x=70", None),
        ("", None),
        (None, None),
    ],
)
def test_normalize_integer(s, n):
    assert normalize_integer(s) == n


def test_canonical_answer():
    assert canonical_answer(r"\text{070}") == "70"
    assert canonical_answer(r"\dfrac {140}{2}") == r"\dfrac{140}{2}"
    assert canonical_answer("   ") is None
    assert canonical_answer(None) is None


# ----------------------------------------------------------------------------------------------- verifying


def test_verify_integer_path_does_not_need_math_verify(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("math-verify must not run for integer answers")

    monkeypatch.setattr(math_answer, "_math_verify_cached", boom)
    assert verify("070", "70") == (True, "integer")
    assert verify(r"\text{71}", "70") == (False, "integer")
    assert verify("  ", "70") == (False, "empty")


def test_verify_maps_worker_failures(monkeypatch):
    def timeout(*a, **k):
        raise TimeoutError

    def crash(*a, **k):
        raise RuntimeError("worker exited")

    monkeypatch.setattr(math_answer, "_math_verify_cached", timeout)
    assert verify(r"\frac{1}{2}", "70") == (None, "timeout")
    assert score_answer(r"\boxed{\frac{1}{2}}", "70").correct is None
    monkeypatch.setattr(math_answer, "_math_verify_cached", crash)
    assert verify(r"\frac{1}{2}", "70") == (None, "error")


# ---------------------------------------------------------------------------------------------- reasoning


@pytest.mark.parametrize(
    ("content", "reasoning", "answer", "thought"),
    [
        ("plain answer", None, "plain answer", None),
        ("<think>a</think>b", None, "b", "a"),
        ("a</think>\n\nb", None, "b", "a"),  # template already opened <think>
        ("<think>a</think>b<think>c</think>d", None, "d", "abc"),
        ("<think>cut off", None, "", "cut off"),
        ("pre <think>cut off", None, "pre", "cut off"),
        ("b", "server thought", "b", "server thought"),
        ("<think>inline</think>b", "server", "b", "server\n\ninline"),
        (None, "only thought", "", "only thought"),
        (None, None, "", None),
        ("", "", "", None),
        ("  \n ", None, "", None),
    ],
)
def test_split_reasoning(content, reasoning, answer, thought):
    assert split_reasoning(content, reasoning) == (answer, thought)

"""Identifiers a summary must keep and a history search matches: a table of real-looking inputs."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloom.engine._identifiers import KEPT_HEADER, cited, identifiers, kept_verbatim, terms

TABLE = [
    (
        "Saved to /srv/app/config.yaml and ./build/out.tar.gz, see https://example.com/a/b?x=1.",
        ["/srv/app/config.yaml", "./build/out.tar.gz", "https://example.com/a/b?x=1"],
    ),
    (
        "Upgrade Django to 5.2.1, it costs $1,250.00 a year; latency 350 ms, 12.5% of 4 GiB",
        ["5.2.1", "$1,250.00", "350 ms", "12.5%", "4 GiB"],
    ),
    (
        "commit 3f9a2c1d9e and id 123e4567-e89b-12d3-a456-426614174000, account acct-42",
        ["3f9a2c1d9e", "123e4567-e89b-12d3-a456-426614174000", "acct-42"],
    ),
    (
        "failed with HTTP 503 and ERR_CONNECTION_RESET, code E1234; called read_record",
        ["HTTP 503", "ERR_CONNECTION_RESET", "E1234", "read_record"],
    ),
    (
        '服务器在 2026年 有 3台，预算 500元，延迟 120毫秒，"keep it short"',
        ["2026年", "3台", "500元", "120毫秒", '"keep it short"'],
    ),
    (
        "ticket JIRA-1234 set code KL-1220-6d81 and PROJ-4242-beta.",
        ["JIRA-1234", "KL-1220-6d81", "PROJ-4242-beta"],
    ),
    ("The quick brown fox decided to go home", []),
]


@pytest.mark.parametrize(("text", "expected"), TABLE)
def test_identifiers_of_real_looking_text(text, expected):
    assert identifiers(text) == expected


def test_an_identifier_stated_twice_is_listed_once():
    assert identifiers("port 8160 ms then 8160 ms again") == ["8160 ms"]


def test_terms_hold_words_identifiers_and_chinese_bigrams():
    found = terms("服务器预算 500元 in /srv/x.py")
    assert {"500元", "/srv/x.py", "in", "服务", "务器", "器预", "预算"} <= set(found)
    assert "服务器预算" not in found


def test_a_summary_missing_identifiers_gets_them_with_context_and_reference():
    sources = [
        ("s:4", "Config lives in /srv/app/config.yaml, port 8160 ms timeout"),
        ("s:9", "Budget raised to $1,250.00 after review"),
    ]
    kept = kept_verbatim("Config is in /srv/app/config.yaml.", sources, 1000)
    assert (kept.found, kept.kept, kept.added) == (3, 1, 2)
    assert kept.section.startswith(KEPT_HEADER)
    assert "- $1,250.00 (s:9): Budget raised to $1,250.00 after review" in kept.section
    assert "- 8160 ms (s:4):" in kept.section
    # The latest record comes first.
    assert kept.section.index("$1,250.00") < kept.section.index("8160 ms")


def test_the_section_stays_within_its_limit_and_names_what_did_not_fit():
    sources = [(f"s:{seq}", f"file /data/part-{seq:04d}.csv written") for seq in range(1, 60)]
    kept = kept_verbatim("", sources, 300)
    assert len(kept.section) <= 300
    assert 0 < kept.added < 59
    assert kept.section.splitlines()[-1].startswith("- more in s:")


def test_nothing_is_added_when_the_summary_keeps_every_identifier():
    kept = kept_verbatim("See /a/b.py and E1234.", [("s:1", "edit /a/b.py, got E1234")], 500)
    assert (kept.section, kept.found, kept.kept, kept.added) == ("", 2, 2, 0)


def test_the_rules_of_compaction_versions_2_and_3_are_kept_for_their_replays():
    # Rules 1 cut an id at the code inside it and knew nothing of the search tool; a replay of a
    # run compacted under version 2 or 3 makes the summary it made.
    text = "code KL-1220-6d81 via search_history of user_input"
    assert identifiers(text, rules=1) == ["KL-1220", "search_history", "user_input"]
    assert identifiers(text) == ["KL-1220-6d81", "search_history", "user_input"]
    kept_1 = kept_verbatim("a summary", [("s:1", text)], 2_000, rules=1)
    kept_2 = kept_verbatim("a summary", [("s:1", text)], 2_000)
    assert "- KL-1220 (s:1)" in kept_1.section and "- search_history" in kept_1.section
    assert "- KL-1220-6d81 (s:1)" in kept_2.section and "search_history (" not in kept_2.section


def test_a_citation_joins_records_and_spans_into_ranges_per_prefix():
    # A span an earlier summary cited, records inside and beside it, another run's record.
    references = ["s:1–5000", "s:3", "s:5001", "r2:4, r2:5", "s:5003–5004", "notes"]
    assert cited(references) == "s:1–5001, s:5003–5004, r2:4–5, notes"


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(min_size=1, max_size=12),
            st.sampled_from(["ΟΔΟΣ", "İstanbul", "Straße", "ǅemal", "KP-1864-34f7", "/srv/a.toml"]),
            st.sampled_from(["代码", "服务的端口", " ", ". ", '"quoted span"', "ΣΑΣ."]),
        ),
        max_size=12,
    ).map("".join)
)
def test_every_term_is_a_span_of_the_lower_cased_text(text):
    # `rank` passes over a text that holds none of the query's terms as a substring (with one
    # sigma: the final form depends on what follows it).
    lowered = text.lower().replace("ς", "σ")
    missing = [term for term in terms(text) if term.replace("ς", "σ") not in lowered]
    assert not missing

"""The prompt-cache doubles keep the providers' rules as their guides state them.

OpenAI's prompt caching guide: the longest prefix shared with an earlier request, in 128-token
blocks from 1,024. DeepSeek's "Context Caching" guide (api-docs.deepseek.com/guides/kv_cache,
read 2026-12-07): a hit is a whole cache prefix unit; units at the end of each request's input
and output, at prefixes common to earlier requests (for the requests after), and at fixed token
intervals. Tokens here are characters, so the sizes read directly.
"""

from __future__ import annotations

from tests.support.prompt_cache import DeepSeekUnitCache, OpenAIPrefixCache


def characters(text: str) -> int:
    return len(text)


A, B, C, D = "a" * 600, "b" * 600, "c" * 600, "d" * 600


def test_openai_caches_the_longest_shared_prefix_in_blocks_from_1024_tokens():
    cache = OpenAIPrefixCache(characters)
    assert cache.serve([A, B]).cached == 0
    # 1,000 shared tokens: below the least cached prefix.
    assert cache.serve([A, "b" * 400 + "x" * 800]).cached == 0
    # 1,200 shared: nine whole blocks of 128.
    served = cache.serve([A, B, C])
    assert (served.prompt, served.cached) == (1_800, 1_152)


def test_openai_matches_any_earlier_request_not_only_the_last():
    cache = OpenAIPrefixCache(characters)
    cache.serve([A, B, C])
    cache.serve([D])
    assert cache.serve([A, B, C, D]).cached == 1_792


def test_deepseek_hits_the_unit_at_the_end_of_an_earlier_input():
    # The guide's example 1: A + B, then A + B + C hits A + B.
    cache = DeepSeekUnitCache(characters, interval=100_000)
    assert cache.serve([A, B]).cached == 0
    assert cache.serve([A, B, C]).cached == 1_200


def test_deepseek_persists_a_common_prefix_for_the_requests_after_the_one_that_shows_it():
    # The guide's example 2: A + B, then A + C misses, then A + D hits A.
    cache = DeepSeekUnitCache(characters, interval=100_000)
    cache.serve([A, B])
    assert cache.serve([A, C]).cached == 0
    assert cache.serve([A, D]).cached == 600


def test_deepseek_hits_only_whole_units():
    cache = DeepSeekUnitCache(characters, interval=100_000)
    cache.serve([A, B])
    # Shares A and half of B with the unit A + B, but matches no unit whole.
    assert cache.serve([A, "b" * 300 + "x" * 300, C]).cached == 0


def test_deepseek_hits_the_unit_at_the_end_of_an_earlier_output():
    cache = DeepSeekUnitCache(characters, interval=100_000)
    cache.serve([A], output=B)
    assert cache.serve([A, B, C]).cached == 1_200


def test_deepseek_persists_units_at_fixed_intervals_of_a_long_input():
    cache = DeepSeekUnitCache(characters, interval=250)
    cache.serve([A, B])
    # Units at 250, 500, 750, 1,000: the longest one inside the shared 900 is 750.
    assert cache.serve([A, "b" * 300 + "x" * 300]).cached == 750
    # A request that leaves A before the first cut matches none of them.
    assert cache.serve(["a" * 200 + "y" * 400, B]).cached == 0

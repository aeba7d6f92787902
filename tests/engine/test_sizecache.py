import pytest

from agentloom.engine._sizecache import JSON_BYTES, carry_json_bytes, json_bytes, same_json


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ({"n": 1}, {"n": 1.0}),
        ({"n": 1}, {"n": True}),
        ({"n": 0.0}, {"n": -0.0}),
        ({1: "a"}, {1.0: "a"}),
        ({"a": "x"}, {"a": "x", "b": None}),
        ([{"a": "x"}], [{"a": "y"}]),
    ],
)
def test_values_equal_in_python_but_not_in_json_are_not_the_same_json(a, b):
    assert not same_json(a, b)


def test_the_same_json_up_to_the_order_of_keys():
    assert same_json({"a": [1, {"b": 2.5}], "c": None}, {"c": None, "a": [1, {"b": 2.5}]})


def test_a_size_is_carried_only_to_the_same_json(monkeypatch):
    source = {"role": "user", "content": "NONCE-carry", "n": 1}
    same = {"n": 1, "content": "NONCE-carry", "role": "user"}
    other = {"role": "user", "content": "NONCE-carry", "n": 1.0}

    carry_json_bytes(same, source, json_bytes(source))
    carry_json_bytes(other, source, json_bytes(source))

    measured = []
    assert JSON_BYTES.total([same], lambda item: measured.append(item) or 0) == json_bytes(source)
    assert JSON_BYTES.total([other], lambda item: measured.append(item) or json_bytes(item)) == (
        json_bytes(other)
    )
    assert measured == [other]

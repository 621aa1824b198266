"""An encoder embeds a passage it embedded lately once: the memo's vectors are the model's, in input order."""

from __future__ import annotations

import numpy as np

from ferret.core.encoder.dual_encoder import DualEncoder, PassageMemo


def test_passages_embedded_lately_come_from_the_memo_and_only_new_ones_are_encoded(encoder: DualEncoder) -> None:
    first = ["Memo test: glaciers carve valleys.", "Memo test: volcanoes erupt when magma rises."]
    calls = encoder.calls
    before = encoder.encode_passages(first)
    assert encoder.calls == calls + 1

    again = encoder.encode_passages(first[::-1])
    assert encoder.calls == calls + 1, "passages embedded a moment ago were encoded again"
    np.testing.assert_array_equal(again, before[::-1])

    new = "Memo test: coral reefs grow in warm shallow seas."
    mixed = encoder.encode_passages([first[1], new, new, first[0]])
    assert encoder.calls == calls + 2  # one forward pass, for the new passage only
    np.testing.assert_array_equal(mixed[[0, 3]], before[::-1])
    np.testing.assert_allclose(mixed[1], encoder.encode([new])[0], atol=1e-5)
    np.testing.assert_array_equal(mixed[1], mixed[2])


def test_the_memo_forgets_the_least_recently_used_passage_first() -> None:
    memo = PassageMemo(capacity=2)
    a, b, c = (PassageMemo.key(text) for text in ("a", "b", "c"))
    memo.store({a: np.zeros(2), b: np.ones(2)})
    assert set(memo.lookup([a])) == {a}  # a is now the most recent
    memo.store({c: np.full(2, 2.0)})
    assert len(memo) == 2
    assert set(memo.lookup([a, b, c])) == {a, c}

    larger = {PassageMemo.key(str(i)): np.full(2, float(i)) for i in range(5)}
    memo.store(larger)  # more than it holds: only the last two are kept
    assert set(memo.lookup(list(larger))) == set(list(larger)[-2:])

    memo.clear()
    assert len(memo) == 0 and memo.lookup(list(larger)) == {}

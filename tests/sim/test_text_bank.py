"""The emulator's text bank on plain data: every window's pre-escaped text is the JSON form of what
the bundled tokenizer decodes from that window's ids, and its id list is those ids; windows wrap
around the end of the bank; a seed gives one stream, the one `random.randrange` draws (as before the
draws were taken in bulk)."""

from __future__ import annotations

import json
import random

from tokenizers import Tokenizer

from moe_tui.sim.engine import TOKENIZER_DIR
from moe_tui.sim.output import TextBank, randrange_draws

TOKENIZER = Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json"))


def test_windows_hold_the_decoded_text_and_ids_of_their_tokens():
    bank = TextBank(TOKENIZER, seed=3)
    rng = random.Random(0)
    windows = [(0, 1), (5, 40), (TextBank.SIZE - 3, 7)] + [(rng.randrange(TextBank.SIZE), rng.randrange(1, 300))
                                                          for _ in range(50)]
    for offset, count in windows:
        ids = bank.token_ids(offset, count)
        assert len(ids) == count
        assert json.loads(f'"{bank.text_json(offset, count)}"') == TOKENIZER.decode(ids), (offset, count)
        assert [int(x) for x in bank.ids_csv(offset, count).split(",")] == ids, (offset, count)


def test_a_seed_gives_one_stream():
    a, b, c = TextBank(TOKENIZER, seed=1), TextBank(TOKENIZER, seed=1), TextBank(TOKENIZER, seed=2)
    assert a.ids == b.ids and a.text == b.text
    assert a.ids != c.ids


def test_the_bulk_draws_are_randranges_draws():
    for n in (8188, 8192, 4097, 2, 1, 50_000):  # the vocabulary's; powers of two and just past one refuse most
        for seed in (0, 7):
            rng = random.Random(seed)
            expected = [rng.randrange(n) for _ in range(20_000)]
            assert randrange_draws(random.Random(seed), n, 20_000) == expected, (n, seed)


def test_the_bank_is_the_stream_randrange_draws():
    vocab = TOKENIZER.get_vocab()
    word_ids = sorted(i for w, i in vocab.items() if w not in {"<unk>", "<s>", "</s>", "<pad>"})
    rng = random.Random(5)
    assert TextBank(TOKENIZER, seed=5).ids == [word_ids[rng.randrange(len(word_ids))] for _ in range(TextBank.SIZE)]

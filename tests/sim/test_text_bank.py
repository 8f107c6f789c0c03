"""The emulator's text bank on plain data: every window's pre-escaped text is the JSON form of what
the bundled tokenizer decodes from that window's ids, and its id list is those ids; windows wrap
around the end of the bank; a seed gives one stream."""

from __future__ import annotations

import json
import random

from tokenizers import Tokenizer

from moe_tui.sim.engine import TOKENIZER_DIR
from moe_tui.sim.output import TextBank

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

"""Build the emulator's small Hugging Face-format tokenizer into `moe_tui/sim/tokenizer/`.

The SGLang emulator (`moe_tui.sim`) reports this directory as `tokenizer_path` in `/model_info`,
counts prompt tokens of `text` inputs with it and decodes the token ids it "generates" with it.
sglang's `random-ids` dataset samples ids uniformly in [0, vocab_size), so every id must decode
to something: the vocabulary is 4 special tokens plus made-up lowercase words (pure ASCII, so the
emulator can splice pre-escaped JSON pieces without re-encoding).

Deterministic: the same script always writes the same bytes. Run it with the project venv:

    .venv/bin/python tools/make_sim_tokenizer.py
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

VOCAB_SIZE = 8192
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]
ONSETS = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w",
          "z", "br", "ch", "dr", "gl", "kr", "pl", "sh", "st", "th", "tr"]
VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "ou"]
CODAS = ["", "", "n", "r", "s", "l", "m", "x"]


def made_up_words(count: int, seed: int = 2024) -> list[str]:
    """`count` distinct pronounceable lowercase words, in a seeded shuffled order."""
    syllables = [o + v + c for o in ONSETS for v in VOWELS for c in CODAS]
    syllables = sorted(set(syllables))
    rng = random.Random(seed)
    words: set[str] = set()
    out: list[str] = []
    while len(out) < count:
        n = rng.choice((1, 2, 2, 2, 3))
        word = "".join(rng.choice(syllables) for _ in range(n))
        if word not in words:
            words.add(word)
            out.append(word)
    return out


def build(out_dir: Path) -> Tokenizer:
    words = made_up_words(VOCAB_SIZE - len(SPECIAL_TOKENS))
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + words)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # WordLevel has no decoder of its own; WordPiece's decoder with an unused prefix joins
    # tokens with single spaces, which is exactly what the emulator assumes when it splices text.
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tokenizer.add_special_tokens(SPECIAL_TOKENS)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out_dir / "tokenizer.json"), pretty=False)
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 131072,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False,
        "add_eos_token": False,
    }
    special = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out_dir / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
    return tokenizer


def main() -> int:
    default_out = Path(__file__).resolve().parent.parent / "moe_tui" / "sim" / "tokenizer"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=default_out)
    args = parser.parse_args()
    tok = build(args.out)
    sample = tok.decode([5, 6, 7, 8000])
    print(f"wrote {args.out} (vocab {tok.get_vocab_size()}); ids 5,6,7,8000 decode to {sample!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

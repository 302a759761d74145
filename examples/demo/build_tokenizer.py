"""Build the demo's uncased WordPiece tokenizer from the shipped Wikipedia sample.

    python examples/demo/build_tokenizer.py  # writes examples/demo/tokenizer/

The result is committed, so the demo needs no download. A rebuild can number the tokens differently (the trainer
breaks frequency ties in no fixed order): a checkpoint works only with the tokenizer it was trained with.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
from transformers import BertTokenizer

HERE = Path(__file__).parent
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default=HERE / "data" / "wiki1m_sample.txt", type=Path)
    parser.add_argument("--output_dir", default=HERE / "tokenizer", type=Path)
    parser.add_argument("--vocab_size", default=8192, type=int)
    args = parser.parse_args()

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=args.vocab_size, special_tokens=SPECIAL_TOKENS, min_frequency=2)
    tokenizer.train([str(args.corpus)], trainer)

    vocab = tokenizer.get_vocab()
    bert_tokenizer = BertTokenizer(vocab=vocab, do_lower_case=True, model_max_length=512)
    bert_tokenizer.save_pretrained(args.output_dir)
    print(f"Wrote a {len(vocab)}-token WordPiece tokenizer to {args.output_dir}")


if __name__ == "__main__":
    main()

"""bench_text_tokenizer.py - the Hugging Face `tokenizers` twin of
scripts/bench_text_tokenizer.lua (run by it; needs `pip install tokenizers`,
never needed by the tests).

Loads the tokenizer.json dlua saved and encodes the documents of
DIR/corpus.txt and DIR/synthetic.txt (separated by NUL bytes) with one
encode_batch call each (run with RAYON_NUM_THREADS=1: one thread), then
trains a BpeTrainer with dlua's settings (ByteLevel pre-tokenizer, the 256
bytes as the initial alphabet, min_frequency 2, the same special tokens) on
the corpus documents.  Prints
  tokenizers=VERSION
  encode NAME mb_s=X mb_cpu_s=Y ids=N sum=S   (S: checksum of the 0-based ids)
  train s=X cpu_s=Y
"""
import argparse
import time

import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers


def best(fn, rounds):
    wall, cpu, res = float("inf"), float("inf"), None
    for _ in range(rounds):
        t0, c0 = time.perf_counter(), time.process_time()
        res = fn()
        wall = min(wall, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    return wall, cpu, res


def checksum(ids):
    return sum(i * (k % 1009 + 1) for k, i in enumerate(ids))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    print("tokenizers=%s" % tokenizers.__version__)
    tok = Tokenizer.from_file(a.tokenizer)
    lists = {}
    for name in ("corpus", "synthetic"):
        with open("%s/%s.txt" % (a.dir, name), "rb") as f:
            data = f.read()
        docs = data.decode("utf-8").split("\0")
        lists[name] = docs
        nbytes = len(data) - (len(docs) - 1)
        wall, cpu, encs = best(lambda: tok.encode_batch(docs, add_special_tokens=False), a.rounds)
        ids = [i for e in encs for i in e.ids]
        print("encode %s mb_s=%.3f mb_cpu_s=%.3f ids=%d sum=%d" % (name, nbytes / wall / 1e6,
              nbytes / cpu / 1e6, len(ids), checksum(ids)))
    docs = lists["corpus"]

    def train():
        t = Tokenizer(models.BPE())
        t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        t.decoder = decoders.ByteLevel()
        tr = trainers.BpeTrainer(vocab_size=a.vocab, min_frequency=2, show_progress=False,
                                 special_tokens=["<|endoftext|>", "<pad>"],
                                 initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        t.train_from_iterator(docs, trainer=tr)
        return t

    wall, cpu, _ = best(train, a.rounds)
    print("train s=%.3f cpu_s=%.3f" % (wall, cpu))


if __name__ == "__main__":
    main()

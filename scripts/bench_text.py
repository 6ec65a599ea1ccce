"""bench_text.py - the PyTorch twin of scripts/bench_text.lua: the GPT of
scripts/gpt_torch.py (same shapes, same recipe) timed for one training step
(forward, loss, backward, gradient clipping, AdamW) and for generation at
batch 1 with a KV cache written as dlua's (per layer k/v buffers, one new
position per token, top-k sampling), each the best of --runs after a
warm-up.  Prints two lines:
    train <best ms per step> <median ms>
    generate <best ms for --gen-tokens tokens> <median ms>
Debian's PyTorch multiplies on the reference BLAS: a step can take most of a
minute, so a phase stops after a minute of runs.
Usage: python3 bench_text.py --layers 6 --width 384 --heads 6 --context 256 --batch 16 --vocab 128
           --gen-tokens 128 --threads 2 --runs 3
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_rnn import timed  # noqa: E402  (best and median ms, a minute at most)
from gpt_torch import GPT  # noqa: E402


@torch.no_grad()
def generate(model, idx, n, top_k):
    """nanoGPT's sampling (temperature 1, top-k) with the KV cache."""
    cache = model.new_cache(idx.shape[0])
    logits, _ = model(idx, cache=cache, last_only=True)
    for i in range(n):
        lg = logits[:, -1, :]
        v, _ = torch.topk(lg, top_k)
        lg = lg.masked_fill(lg < v[:, [-1]], float("-inf"))
        nxt = torch.multinomial(torch.softmax(lg, dim=-1), 1)
        idx = torch.cat((idx, nxt), dim=1)
        if i + 1 < n:
            logits, _ = model(nxt, cache=cache, last_only=True)
    return idx


def main():
    p = argparse.ArgumentParser()
    for k, v in (("layers", 6), ("width", 384), ("heads", 6), ("context", 256), ("batch", 16), ("vocab", 128),
                 ("gen-tokens", 128), ("top-k", 40), ("threads", 2), ("runs", 3)):
        p.add_argument("--" + k, type=int, default=v)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = GPT(a.vocab, a.context, a.layers, a.heads, a.width, 0.0, True)
    opt = model.configure_optimizers(0.1, 6e-4, (0.9, 0.95))
    x = torch.randint(0, a.vocab, (a.batch, a.context))
    y = torch.randint(0, a.vocab, (a.batch, a.context))

    def step():
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    tb, tm = timed(step, a.runs)
    print("train %.2f %.2f" % (tb, tm), flush=True)
    model.eval()
    prompt = torch.zeros(1, 1, dtype=torch.long)
    n = min(a.gen_tokens, a.context - 1)
    gb, gm = timed(lambda: generate(model, prompt, n, a.top_k), a.runs)
    print("generate %.2f %.2f" % (gb, gm), flush=True)


if __name__ == "__main__":
    main()

# bench_rnn.py - the PyTorch twin of scripts/bench_rnn.lua: one nn.LSTM or
# nn.GRU (CPU, float32) timed forward + backward and forward alone (no_grad)
# on the same shapes.  Run with Debian's /usr/bin/python3.  Prints
#   "torch <mode> <fwd+bwd best ms> <fwd+bwd median ms> <fwd best ms> <fwd median ms>"
# Usage: python3 bench_rnn.py MODE LAYERS HIDDEN INPUT SEQ BATCH THREADS RUNS [BIDIRECTIONAL]
import statistics
import sys
import time

import torch


def timed(f, runs):
    f()  # warm-up
    ts = []
    # Debian's build multiplies on the reference BLAS (BLAS_INFO=generic):
    # an iteration can take most of a minute, so stop after a minute's runs
    while len(ts) < runs and not (ts and sum(ts) > 60e3):
        t0 = time.perf_counter()
        f()
        ts.append((time.perf_counter() - t0) * 1e3)
    return min(ts), statistics.median(ts)


def main():
    mode, layers, hidden, inp, seq, batch, threads, runs = sys.argv[1:9]
    bidir = len(sys.argv) > 9 and sys.argv[9] == "1"
    layers, hidden, inp, seq, batch, threads, runs = map(int, (layers, hidden, inp, seq, batch, threads, runs))
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cls = torch.nn.LSTM if mode == "lstm" else torch.nn.GRU
    m = cls(inp, hidden, num_layers=layers, bidirectional=bidir)
    x = torch.randn(seq, batch, inp, requires_grad=True)

    def train_step():
        out, _ = m(x)
        out.sum().backward()

    def forward():
        with torch.no_grad():
            m(x)

    tb, tm = timed(train_step, runs)
    fb, fm = timed(forward, runs)
    print("torch %s %.2f %.2f %.2f %.2f" % (mode, tb, tm, fb, fm), flush=True)


if __name__ == "__main__":
    main()

"""onnx_helper.py - the Python side of dlua's ONNX tests and benchmark.

  check MODEL                 onnx.checker (full check, with shape inference);
                              prints "ok" (Debian python3-onnx)
  ort MODEL OUTDIR IN.pb...   runs MODEL with ONNX Runtime on 2 threads and
                              writes OUTDIR/output_<i>.pb (a venv with PyPI
                              onnxruntime: no onnx package needed, the few
                              TensorProto fields used are coded here)
  ortbench MODEL IN.pb N      times N runs (after 2 warm-ups) with ONNX
                              Runtime; prints the best and median seconds
  torch_export KIND OUTDIR    exports a torch model (torch.onnx.export, dynamic
                              batch) to OUTDIR/model.onnx with
                              test_data_set_0/input_0.pb and output_0.pb
                              (Debian python3-torch, torchvision, onnx)
"""
import os
import struct
import sys
import time

# --- a minimal TensorProto codec (dims, data_type, raw_data / float_data / int64_data) ---

_NP = {1: "float32", 2: "uint8", 6: "int32", 7: "int64", 9: "bool", 10: "float16", 11: "float64"}


def _varint(buf, pos):
    r, shift = 0, 0
    while True:
        b = buf[pos]
        pos += 1
        r |= (b & 0x7F) << shift
        if not b & 0x80:
            return r, pos
        shift += 7


def read_tensor(path):
    import numpy as np
    buf = open(path, "rb").read()
    pos, dims, dtype, raw, floats, ints = 0, [], 1, None, [], []
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        field, wt = key >> 3, key & 7
        if wt == 0:
            v, pos = _varint(buf, pos)
            if field == 1:
                dims.append(v)
            elif field == 2:
                dtype = v
            elif field == 7:
                ints.append(v if v < 1 << 63 else v - (1 << 64))
        elif wt == 2:
            n, pos = _varint(buf, pos)
            body = buf[pos:pos + n]
            pos += n
            if field == 1:  # packed dims
                p = 0
                while p < len(body):
                    v, p = _varint(body, p)
                    dims.append(v)
            elif field == 9:
                raw = body
            elif field == 4:
                floats.extend(struct.unpack("<%df" % (len(body) // 4), body))
            elif field == 7:
                p = 0
                while p < len(body):
                    v, p = _varint(body, p)
                    ints.append(v if v < 1 << 63 else v - (1 << 64))
        elif wt == 5:
            if field == 4:
                floats.append(struct.unpack("<f", buf[pos:pos + 4])[0])
            pos += 4
        elif wt == 1:
            pos += 8
    dt = np.dtype(_NP[dtype])
    if raw is not None:
        a = np.frombuffer(raw, dtype=dt)
    elif dtype == 1:
        a = np.array(floats, dtype=dt)
    else:
        a = np.array(ints, dtype=dt)
    return a.reshape(dims)


def _key(field, wt):
    return _enc_varint(field << 3 | wt)


def _enc_varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def write_tensor(path, a):
    import numpy as np
    codes = {v: k for k, v in _NP.items()}
    a = np.ascontiguousarray(a)
    out = bytearray()
    for d in a.shape:
        out += _key(1, 0) + _enc_varint(d)
    out += _key(2, 0) + _enc_varint(codes[str(a.dtype)])
    raw = a.tobytes()
    out += _key(9, 2) + _enc_varint(len(raw)) + raw
    open(path, "wb").write(bytes(out))


# --- commands ----------------------------------------------------------------------------------


def cmd_check(model):
    import onnx
    m = onnx.load(model)
    onnx.checker.check_model(m, full_check=True)
    print("ok")


def _session(model):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def cmd_ort(model, outdir, *inputs):
    s = _session(model)
    feeds = {i.name: read_tensor(p) for i, p in zip(s.get_inputs(), inputs)}
    outs = s.run(None, feeds)
    for k, o in enumerate(outs):
        write_tensor(os.path.join(outdir, "output_%d.pb" % k), o)
    print("ok", len(outs))


def cmd_ortbench(model, inp, n):
    s = _session(model)
    feeds = {s.get_inputs()[0].name: read_tensor(inp)}
    for _ in range(2):
        s.run(None, feeds)
    times = []
    for _ in range(int(n)):
        t = time.perf_counter()
        s.run(None, feeds)
        times.append(time.perf_counter() - t)
    times.sort()
    print("best %.6f median %.6f" % (times[0], times[len(times) // 2]))


def _torch_model(kind):
    import torch
    import torch.nn as nn
    torch.manual_seed(0)
    if kind in ("resnet18", "resnet50"):
        import torchvision
        m = getattr(torchvision.models, kind)(num_classes=10)
        # non-trivial batch-norm statistics
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.1, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
        return m.eval(), torch.randn(2, 3, 64, 64)
    if kind == "mlp":
        # view with a batch dim read from the input, layer norm, GELU, softmax
        class MLP(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc1 = nn.Linear(12, 16)
                self.norm = nn.LayerNorm(16)
                self.fc2 = nn.Linear(16, 5)

            def forward(self, x):
                b = x.shape[0]
                h = torch.nn.functional.gelu(self.norm(self.fc1(x.view(b, -1))))
                return torch.softmax(self.fc2(h), dim=-1)
        return MLP().eval(), torch.randn(3, 3, 4)
    if kind == "convnet":
        # 1-D and transposed convolutions, PReLU, pixel shuffle, upsampling
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.c1 = nn.Conv1d(3, 8, 3, padding=1)
                self.c2 = nn.Conv2d(2, 8, 3, padding=1)
                self.act = nn.PReLU(8)
                self.up = nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1)
                self.ps = nn.PixelShuffle(2)

            def forward(self, x):
                n = x.shape[0]
                y = self.c1(x.flatten(2))  # (N, 8, 16)
                y = y.view(n, 2, 8, 8)
                y = self.act(self.c2(y))
                y = self.ps(self.up(y))  # (N, 1, 32, 32)
                y = torch.nn.functional.interpolate(y, scale_factor=2, mode="nearest")
                return torch.nn.functional.avg_pool2d(y, 2) + torch.nn.functional.max_pool2d(y, 2)
        return Net().eval(), torch.randn(2, 3, 4, 4)
    if kind == "rnn":
        # LSTM (2 layers, bidirectional, batch_first) then a GRU and an RNN
        class Seq(nn.Module):
            def __init__(self):
                super().__init__()
                self.lstm = nn.LSTM(5, 4, num_layers=2, bidirectional=True, batch_first=True)
                self.gru = nn.GRU(8, 3)
                self.rnn = nn.RNN(3, 2, nonlinearity="relu")

            def forward(self, x):
                y, _ = self.lstm(x)             # (N, T, 8)
                z, h = self.gru(y.transpose(0, 1))  # (T, N, 3)
                w, _ = self.rnn(z)
                return w.transpose(0, 1) + h.transpose(0, 1).sum(2, keepdim=True)
        return Seq().eval(), torch.randn(3, 6, 5)
    raise SystemExit("unknown model kind " + kind)


def cmd_torch_export(kind, outdir):
    import numpy as np
    import torch
    from onnx import numpy_helper
    m, x = _torch_model(kind)
    os.makedirs(os.path.join(outdir, "test_data_set_0"), exist_ok=True)
    path = os.path.join(outdir, "model.onnx")
    torch.onnx.export(m, (x,), path, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}, opset_version=13)
    with torch.no_grad():
        y = m(x)
    for name, t in (("input_0", x), ("output_0", y)):
        p = numpy_helper.from_array(np.ascontiguousarray(t.numpy()))
        open(os.path.join(outdir, "test_data_set_0", name + ".pb"), "wb").write(p.SerializeToString())
    print("ok")


if __name__ == "__main__":
    cmds = {"check": cmd_check, "ort": cmd_ort, "ortbench": cmd_ortbench, "torch_export": cmd_torch_export}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        raise SystemExit(__doc__)
    cmds[sys.argv[1]](*sys.argv[2:])

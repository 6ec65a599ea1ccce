#!/usr/bin/env python3
"""convert_torchvision.py - writes a torchvision model's state dict as a
safetensors file that dlua's dl.load reads.

    python3 scripts/convert_torchvision.py --arch resnet50 --out resnet50.safetensors
    python3 scripts/convert_torchvision.py --arch resnet18 --pretrained --out r18.safetensors
    python3 scripts/convert_torchvision.py --checkpoint model.pth --out model.safetensors

Without --pretrained or --checkpoint the model is randomly initialised after
torch.manual_seed(--seed), so the output is reproducible.  Checkpoints may be a
bare state dict or a dict holding one under "state_dict" or "model"; a
"module." prefix (DataParallel / DistributedDataParallel) is stripped.

The writer is self-contained (struct + json, no `safetensors` package): an
8-byte little-endian header length, the JSON header with keys sorted by name
and padded with spaces to an 8-byte boundary, then each tensor's bytes laid out
largest element size first, then by name, so every tensor is aligned for its
dtype.  Tensors sharing storage (tied weights) are written as separate copies.
"""
import argparse
import json
import os
import struct
import sys

import torch

DTYPES = {
    torch.float32: ("F32", None),
    torch.float64: ("F64", None),
    torch.float16: ("F16", None),
    torch.bfloat16: ("BF16", torch.int16),  # numpy has no bfloat16: view as int16
    torch.int64: ("I64", None),
    torch.int32: ("I32", None),
    torch.uint8: ("U8", None),
    torch.bool: ("BOOL", None),
}


def tensor_bytes(t):
    """The tensor's bytes, row-major, little-endian."""
    t = t.detach().cpu().contiguous()
    if t.numel() == 0:
        return b""
    view = DTYPES[t.dtype][1]
    flat = t.reshape(-1)
    if view is not None:
        flat = flat.view(view)
    data = flat.numpy().tobytes()
    if sys.byteorder != "little" and t.element_size() > 1:
        raise SystemExit("convert_torchvision: big-endian hosts are not supported")
    return data


def save_safetensors(path, tensors, metadata=None):
    """Writes {name: tensor} (+ optional {str: str} metadata) to path atomically."""
    for name, t in tensors.items():
        if not isinstance(name, str):
            raise SystemExit("convert_torchvision: tensor name %r is not a string" % (name,))
        if name == "__metadata__":
            raise SystemExit("convert_torchvision: '__metadata__' cannot name a tensor")
        if not isinstance(t, torch.Tensor):
            raise SystemExit("convert_torchvision: %s is a %s, not a tensor" % (name, type(t).__name__))
        if t.dtype not in DTYPES:
            raise SystemExit("convert_torchvision: tensor %s has dtype %s, which safetensors "
                             "for dlua does not support" % (name, t.dtype))
    layout = sorted(tensors, key=lambda n: (-tensors[n].element_size(), n))
    header, pos = {}, 0
    for name in layout:
        t = tensors[name]
        nbytes = t.numel() * t.element_size()
        header[name] = {"dtype": DTYPES[t.dtype][0], "shape": list(t.shape),
                        "data_offsets": [pos, pos + nbytes]}
        pos += nbytes
    ordered = {}
    if metadata:
        ordered["__metadata__"] = {str(k): str(v) for k, v in sorted(metadata.items())}
    for name in sorted(header):
        ordered[name] = header[name]
    text = json.dumps(ordered, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            for name in layout:
                f.write(tensor_bytes(tensors[name]))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def clean_state_dict(obj):
    """A checkpoint's state dict with 'module.' prefixes removed."""
    if isinstance(obj, torch.nn.Module):
        obj = obj.state_dict()
    if isinstance(obj, dict):
        for key in ("state_dict", "model", "model_state_dict"):
            inner = obj.get(key)
            if isinstance(inner, dict) or isinstance(inner, torch.nn.Module):
                return clean_state_dict(inner)
    if not isinstance(obj, dict):
        raise SystemExit("convert_torchvision: the checkpoint holds a %s, not a state dict"
                         % type(obj).__name__)
    out = {}
    for k, v in obj.items():
        if not isinstance(v, torch.Tensor):
            print("convert_torchvision: skipping %s (a %s, not a tensor)" % (k, type(v).__name__),
                  file=sys.stderr)
            continue
        if k.startswith("module."):
            k = k[len("module."):]
        if k in out:
            raise SystemExit("convert_torchvision: duplicate key %s after removing 'module.'" % k)
        out[k] = v
    return out


def build_model(arch, pretrained, seed, num_classes):
    import torchvision

    models = torchvision.models
    if arch not in models.list_models():
        raise SystemExit("convert_torchvision: unknown architecture '%s'" % arch)
    torch.manual_seed(seed)
    kwargs = {}
    if num_classes is not None:
        kwargs["num_classes"] = num_classes
    if not pretrained:
        return models.get_model(arch, weights=None, **kwargs)
    weights = models.get_model_weights(arch).DEFAULT
    cached = os.path.join(torch.hub.get_dir(), "checkpoints", os.path.basename(weights.url))
    if not os.path.exists(cached):
        raise SystemExit("convert_torchvision: pretrained weights for %s are not in the torch hub "
                         "cache (%s) and this script does not download; fetch them on a machine "
                         "with network access (torchvision.models.get_model('%s', weights='DEFAULT')) "
                         "or pass --checkpoint" % (arch, cached, arch))
    if num_classes is not None and num_classes != len(weights.meta.get("categories", [])):
        raise SystemExit("convert_torchvision: --num-classes does not match the pretrained weights")
    model = models.get_model(arch, weights=None, **kwargs)
    model.load_state_dict(torch.load(cached, map_location="cpu"))
    return model


def state_dict_for(args):
    """The state dict the command line asks for (used by the tests too)."""
    if args.checkpoint:
        return clean_state_dict(torch.load(args.checkpoint, map_location="cpu"))
    model = build_model(args.arch, args.pretrained, args.seed, args.num_classes)
    return model.state_dict()


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Write a torchvision model's weights (or a .pth checkpoint's state dict) "
                    "as safetensors for dlua.",
        epilog="No network access is used: --pretrained only works when the weights are already "
               "in the torch hub cache (%s/checkpoints)." % torch.hub.get_dir())
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--arch", help="torchvision architecture, e.g. resnet18, resnet50")
    src.add_argument("--checkpoint", help="a .pth file: a state dict, or a dict holding one "
                                          "under 'state_dict' / 'model'")
    p.add_argument("--pretrained", action="store_true",
                   help="load the DEFAULT torchvision weights from the torch hub cache "
                        "(never downloads)")
    p.add_argument("--seed", type=int, default=0, help="seed for random initialisation (default 0)")
    p.add_argument("--num-classes", type=int, default=None, help="classifier size (random init)")
    p.add_argument("--out", required=True, help="output .safetensors path")
    args = p.parse_args(argv)
    if args.checkpoint and args.pretrained:
        p.error("--pretrained goes with --arch, not --checkpoint")
    return args


def main(argv=None):
    args = parse_args(argv)
    sd = state_dict_for(args)
    meta = {"format": "pt", "source": args.checkpoint and os.path.basename(args.checkpoint)
            or "torchvision.%s%s" % (args.arch, " (pretrained)" if args.pretrained
                                     else " (seed %d)" % args.seed)}
    save_safetensors(args.out, sd, meta)
    total = sum(t.numel() for t in sd.values())
    print("wrote %s: %d tensors, %d values" % (args.out, len(sd), total))


if __name__ == "__main__":
    main()

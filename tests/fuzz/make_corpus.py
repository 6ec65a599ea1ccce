#!/usr/bin/env python3
"""make_corpus.py - writes the seed corpora of the fuzz targets into
tests/fuzz/corpus/<target>/: a few small valid inputs per target (a few KB in
all), each covering a branch of the parser (JPEG: gray, RGB, CMYK,
progressive, odd sizes; PNG: palette, alpha, 16-bit, interlaced; safetensors:
every dtype, metadata, empty tensors; IDX: every element type, gzip; nested
tables: byte programs; ImageFolder: NUL-separated path lists; ONNX: small
models and tensors).  Needs Pillow (and python3-onnx for the ONNX seeds).
Deterministic: rerunning it rewrites the same bytes."""
import gzip, io, json, os, struct, sys
from PIL import Image

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(root, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def img(mode, size):
    im = Image.new(mode, size)
    w, h = size
    px = im.load()
    for y in range(h):
        for x in range(w):
            v = (x * 37 + y * 91) % 256
            px[x, y] = {"L": v, "RGB": (v, 255 - v, x * 8 % 256), "RGBA": (v, 0, 255 - v, y * 20 % 256),
                        "CMYK": (v, 0, 255 - v, 30), "P": v % 16, "I;16": v * 257,
                        "LA": (v, 128), "1": v > 127}[mode]
    return im


def save(im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    return b.getvalue()


put("jpeg", "gray.jpg", save(img("L", (9, 7)), "JPEG", quality=50))
put("jpeg", "rgb.jpg", save(img("RGB", (17, 12)), "JPEG", quality=60))
put("jpeg", "rgb444.jpg", save(img("RGB", (8, 8)), "JPEG", quality=90, subsampling=0))
put("jpeg", "cmyk.jpg", save(img("CMYK", (10, 6)), "JPEG", quality=50))
put("jpeg", "progressive.jpg", save(img("RGB", (20, 13)), "JPEG", quality=40, progressive=True))
put("png", "gray.png", save(img("L", (5, 3)), "PNG"))
put("png", "rgb.png", save(img("RGB", (6, 4)), "PNG"))
put("png", "rgba.png", save(img("RGBA", (4, 4)), "PNG"))
put("png", "palette.png", save(img("P", (7, 5)), "PNG"))
put("png", "gray16.png", save(img("I;16", (3, 3)), "PNG"))
put("png", "la.png", save(img("LA", (3, 2)), "PNG"))
put("png", "bilevel.png", save(img("1", (9, 2)), "PNG"))
put("png", "interlaced.png", save(img("RGB", (9, 9)), "PNG", interlace=1))


def safetensors(tensors, meta=None):
    header, data = {}, b""
    for name, (dt, shape, raw) in tensors.items():
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if meta:
        header["__metadata__"] = meta
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


put("safetensors", "f32.safetensors", safetensors({"w": ("F32", [2, 3], struct.pack("<6f", *range(6)))}))
put("safetensors", "mixed.safetensors", safetensors({
    "a": ("F64", [2], struct.pack("<2d", 1.5, -2)), "b": ("I64", [1, 1], struct.pack("<q", 7)),
    "c": ("U8", [3], b"\x01\x02\x03"), "d": ("BOOL", [2], b"\x00\x01"),
    "e": ("F16", [1], b"\x00\x3c"), "f": ("BF16", [1], b"\x80\x3f"), "g": ("I32", [], struct.pack("<i", 3))},
    {"format": "pt", "epoch": "3"}))
put("safetensors", "empty.safetensors", safetensors({"z": ("F32", [0, 4], b"")}))
put("safetensors", "meta_only.safetensors", safetensors({}, {"k": "v"}))


def idx(code, fmt, shape, values):
    return bytes([0, 0, code, len(shape)]) + struct.pack(">%dI" % len(shape), *shape) + \
        struct.pack(">%d%s" % (len(values), fmt), *values)


put("idx", "ubyte.idx", idx(0x08, "B", [2, 3], list(range(6))))
put("idx", "byte.idx", idx(0x09, "b", [4], [-1, 0, 1, 127]))
put("idx", "short.idx", idx(0x0B, "h", [2], [-300, 300]))
put("idx", "int.idx", idx(0x0C, "i", [1, 2], [-70000, 5]))
put("idx", "float.idx", idx(0x0D, "f", [3], [0.5, -1, 3]))
put("idx", "double.idx", idx(0x0E, "d", [2], [1e300, -0.25]))
put("idx", "labels.idx.gz", gzip.compress(idx(0x08, "B", [5], [1, 2, 3, 4, 5]), mtime=0))

# nested tables: byte 0 is the dtype selector, then ops (low 3 bits):
# 0 open, 1 close, 2 int64, 3 double, 4 bool, 5 string, 6 hole, 7 key
i64 = lambda v: b"\x02" + struct.pack("<q", v)
f64 = lambda v: b"\x03" + struct.pack("<d", v)
put("nested_table", "flat_ints", b"\x00" + i64(1) + i64(2) + i64(3))
put("nested_table", "matrix_f64", b"\x09" + b"\x00" + f64(1.5) + f64(2) + b"\x01" + b"\x00" + f64(3) + f64(4) + b"\x01")
put("nested_table", "ragged", b"\x00" + b"\x00" + i64(1) + b"\x01" + b"\x00" + i64(1) + i64(2) + b"\x01")
put("nested_table", "bools_u8", b"\x0c" + b"\x04\x0c\x04")
put("nested_table", "nan_inf_f16", b"\x0e" + f64(float("nan")) + f64(float("inf")) + f64(-1e300))
put("nested_table", "deep", b"\x00" + b"\x00" * 10 + i64(5) + b"\x01" * 10)
put("nested_table", "hole_string", b"\x00" + i64(1) + b"\x06" + i64(3) + b"\x05")

# ImageFolder trees: NUL-separated entries; 'x/' a folder, '@x' a symlink
put("folder", "two_classes", b"cat/a.png\x00cat/b.JPG\x00dog/c.jpeg\x00dog/sub/d.png")
put("folder", "empty_class", b"cat/a.png\x00dog/")
put("folder", "odd_names", "caf\u00e9/\u00fc\u00df.png\x00sp ace/new\nline.jpg\x00-x/.png".encode())
put("folder", "symlinks", b"a/x.png\x00@a/loop\x00@b/up\x00b/y.jpg")
put("folder", "no_classes", b"top.png")
# ONNX models and tensors (python3-onnx): initializers as raw_data and typed
# fields, opset-11 and opset-13 forms, a subgraph, a TensorProto file
try:
    import numpy as np
    import onnx
    from onnx import TensorProto as TP, helper as oh, numpy_helper as onp
except ImportError:
    onnx = None
if onnx is not None:
    def model(nodes, inputs, outputs, inits=(), opset=13):
        g = oh.make_graph(nodes, "g", inputs, outputs, list(inits))
        return oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)], producer_name="corpus").SerializeToString()
    vi = oh.make_tensor_value_info
    w = onp.from_array(np.arange(24, dtype=np.float32).reshape(2, 3, 2, 2) / 10, "conv.weight")
    b = oh.make_tensor("conv.bias", TP.FLOAT, [2], [0.5, -0.5])  # float_data
    put("onnx", "conv_relu.onnx", model(
        [oh.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
         oh.make_node("Relu", ["c"], ["y"])],
        [vi("x", TP.FLOAT, ["N", 3, 5, 5])], [vi("y", TP.FLOAT, ["N", 2, 3, 3])], [w, b]))
    put("onnx", "shape_ops.onnx", model(
        [oh.make_node("Shape", ["x"], ["s"]),
         oh.make_node("Constant", [], ["k"], value=oh.make_tensor("k", TP.INT64, [1], [-1])),
         oh.make_node("Slice", ["x", "st", "en", "ax"], ["sl"]),
         oh.make_node("Reshape", ["sl", "k"], ["y"])],
        [vi("x", TP.FLOAT, [2, 4])], [vi("y", TP.FLOAT, [4])],
        [oh.make_tensor("st", TP.INT64, [1], [1]), oh.make_tensor("en", TP.INT64, [1], [3]),
         oh.make_tensor("ax", TP.INT64, [1], [1])]))
    put("onnx", "squeeze_opset11.onnx", model(
        [oh.make_node("Squeeze", ["x"], ["y"], axes=[1]), oh.make_node("Clip", ["y"], ["z"])],
        [vi("x", TP.FLOAT, [3, 1])], [vi("z", TP.FLOAT, [3])], opset=11))
    then_g = oh.make_graph([oh.make_node("Neg", ["x"], ["t"])], "then", [], [vi("t", TP.FLOAT, [2])])
    else_g = oh.make_graph([oh.make_node("Abs", ["x"], ["e"])], "else", [], [vi("e", TP.FLOAT, [2])])
    put("onnx", "if.onnx", model(
        [oh.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
        [vi("c", TP.BOOL, []), vi("x", TP.FLOAT, [2])], [vi("y", TP.FLOAT, [2])]))
    put("onnx", "tensor_int64.pb", oh.make_tensor("t", TP.INT64, [2, 2], [1, -2, 3, 1 << 40]).SerializeToString())
    put("onnx", "tensor_raw_f16.pb", onp.from_array(np.array([0.5, -2, 65504], dtype=np.float16)).SerializeToString())
print("corpus written to", root)

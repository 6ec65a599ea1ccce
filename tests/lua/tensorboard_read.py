# tensorboard_read.py - reads event files with TensorBoard's own loaders (the
# PyPI `tensorboard` package, in the venv test_tensorboard.lua makes) and
# prints what it found as a Lua table constructor, for the Lua test to compare
# with what it wrote.
#
#   python tensorboard_read.py acc DIR     EventAccumulator over the run in DIR:
#       {scalars = {tag = {{step, value}, ...}}, images = {tag = {{step, width,
#        height, mode, pixels (HWC bytes as a string)}}}, histograms = {tag =
#        {{step, min, max, num, sum, sum_squares, bucket_limit, bucket}}},
#        texts = {tag = {{step, text}}}}
#   python tensorboard_read.py loader FILE  EventFileLoader over one file:
#       {{step, kind, tag}, ...} for every event it yields
#   python tensorboard_read.py hparams DIR  the hparams plugin's data of the run:
#       {hparams = {{name, type, domain}}, metrics = {tag, ...}, values = {name = value},
#        status = name, scalars = {tag = {{step, value}}}}
import io
import sys

from PIL import Image
from tensorboard.backend.event_processing import event_accumulator, event_file_loader


def lua(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if v == v and abs(v) != float("inf") else "(0/0)"
    if isinstance(v, (bytes, str)):
        b = v.encode("utf-8") if isinstance(v, str) else v
        return '"' + "".join("\\%d" % c for c in b) + '"'
    if isinstance(v, dict):
        return "{" + ", ".join("[%s] = %s" % (lua(k), lua(x)) for k, x in v.items()) + "}"
    return "{" + ", ".join(lua(x) for x in v) + "}"


def accumulate(path):
    guidance = {k: 0 for k in ("scalars", "images", "histograms", "tensors", "compressedHistograms", "audio")}
    acc = event_accumulator.EventAccumulator(path, size_guidance=guidance, purge_orphaned_data=False)
    acc.Reload()
    tags = acc.Tags()
    out = {"scalars": {}, "images": {}, "histograms": {}, "texts": {}}
    for t in tags["scalars"]:
        out["scalars"][t] = [[e.step, e.value] for e in acc.Scalars(t)]
    for t in tags["images"]:
        rows = []
        for e in acc.Images(t):
            im = Image.open(io.BytesIO(e.encoded_image_string))
            im.load()
            rows.append([e.step, e.width, e.height, im.mode, im.tobytes()])
        out["images"][t] = rows
    for t in tags["histograms"]:
        rows = []
        for e in acc.Histograms(t):
            h = e.histogram_value
            rows.append([e.step, h.min, h.max, h.num, h.sum, h.sum_squares, list(h.bucket_limit), list(h.bucket)])
        out["histograms"][t] = rows
    for t in tags["tensors"]:
        rows = []
        for e in acc.Tensors(t):
            rows.append([e.step, e.tensor_proto.string_val[0].decode("utf-8")])
        out["texts"][t] = rows
    return out


def load(path):
    out = []
    for ev in event_file_loader.EventFileLoader(path).Load():
        if ev.HasField("summary"):
            for v in ev.summary.value:
                out.append([ev.step, v.WhichOneof("value") or "none", v.tag])
        else:
            out.append([ev.step, ev.WhichOneof("what") or "none", ev.file_version])
    return out


def pb_value(v):
    return getattr(v, v.WhichOneof("kind"))


def hparams(path):
    from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

    acc = event_accumulator.EventAccumulator(path, purge_orphaned_data=False)
    acc.Reload()
    content = acc.PluginTagToContent("hparams")
    exp = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    end = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_end_info"]).session_end_info
    return {
        "hparams": [[h.name, api_pb2.DataType.Name(h.type), [pb_value(v) for v in h.domain_discrete.values]]
                    for h in exp.hparam_infos],
        "metrics": [m.name.tag for m in exp.metric_infos],
        "values": {k: pb_value(v) for k, v in start.hparams.items()},
        "status": api_pb2.Status.Name(end.status),
        "scalars": {t: [[e.step, e.value] for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]},
    }


if __name__ == "__main__":
    mode, path = sys.argv[1], sys.argv[2]
    result = {"acc": accumulate, "loader": load, "hparams": hparams}[mode](path)
    print("return " + lua(result))

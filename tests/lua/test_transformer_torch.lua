-- test_transformer_torch.lua - the Transformer layers against PyTorch's with
-- the same weights (torch's state_dict loaded into the dl module, so the
-- state_dict keys must match): TransformerEncoderLayer and
-- TransformerDecoderLayer with relu, gelu and a function activation,
-- norm_first and batch_first both ways, float masks, bool key padding masks,
-- causal masks (PyTorch 1.13 takes the triangle as a float mask; dl also as
-- is_causal / tgt_is_causal), layer_norm_eps; TransformerEncoder and
-- TransformerDecoder with a final norm; the whole nn.Transformer.  Outputs,
-- input gradients and every parameter gradient, in float32 and float64
-- (dropout 0: PyTorch's random stream is not ours).  Last, a torch checkpoint
-- of an encoder converted by scripts/convert_torchvision.py to safetensors
-- loads by name (strict) and gives torch's output.
local T = require "testlib"
local nn = dl.nn

local data = T.torch([==[
import torch.nn as tnn
import torch.nn.functional as TF
NEG = float("-inf")

def causal(n, dt):
    return torch.triu(torch.full((n, n), NEG, dtype=dt), 1)

def run(name, kind, m, dt, ctor, inputs, fwd, lua_fwd=None):
    for prm in m.parameters():
        with torch.no_grad():
            prm.add_(torch.randn_like(prm) * 0.2)  # non-trivial norms and biases
    m = m.to(dt)
    xs = [leaf(mk(s, dt)) for s in inputs]
    y = m(*xs, **fwd)
    gy = mk(y.shape, dt)
    names = [n for n, _ in m.named_parameters()]
    grads = torch.autograd.grad((y * gy).sum(), xs + list(m.parameters()))
    add(op=kind, name=name, ctor=ctor, sd=dict(m.state_dict()), xs=xs, fwd=lua_fwd or fwd, y=y, gy=gy,
        gx=list(grads[:len(xs)]), gp=dict(zip(names, grads[len(xs):])))

L, S, N, D, H, FF = 6, 5, 2, 8, 2, 16
kpm_src = torch.zeros(N, L, dtype=torch.bool); kpm_src[0, 4:] = True
kpm_mem = torch.zeros(N, S, dtype=torch.bool); kpm_mem[1, 0] = True
for dt in (torch.float32, torch.float64):
    for act in ("relu", "gelu"):
        for nf in (False, True):
            for bf in (False, True):
                ctor = dict(dim_feedforward=FF, dropout=0.0, activation=act, norm_first=nf, batch_first=bf)
                shp = (N, L, D) if bf else (L, N, D)
                run("encoder layer %s norm_first=%s batch_first=%s" % (act, nf, bf), "enc_layer",
                    tnn.TransformerEncoderLayer(D, H, **ctor), dt, ctor, [shp],
                    dict(src_mask=mk((L, L), dt), src_key_padding_mask=kpm_src))
    ctor = dict(dim_feedforward=FF, dropout=0.0, activation="gelu", layer_norm_eps=1e-3)
    run("encoder layer causal", "enc_layer", tnn.TransformerEncoderLayer(D, H, **ctor), dt, ctor,
        [(L, N, D)], dict(src_mask=causal(L, dt)), dict(is_causal=True))
    fctor = dict(dim_feedforward=FF, dropout=0.0, activation=TF.gelu)
    run("encoder layer function activation", "enc_layer",
        tnn.TransformerEncoderLayer(D, H, **fctor), dt, dict(dim_feedforward=FF, dropout=0.0,
        activation="function gelu"), [(L, N, D)], {})
    for nf in (False, True):
        ctor = dict(dim_feedforward=FF, dropout=0.0, norm_first=nf)
        mm = mk((L, S), dt)
        pads = dict(memory_mask=mm, tgt_key_padding_mask=kpm_src, memory_key_padding_mask=kpm_mem)
        run("decoder layer norm_first=%s" % nf, "dec_layer", tnn.TransformerDecoderLayer(D, H, **ctor), dt,
            ctor, [(L, N, D), (S, N, D)], dict(tgt_mask=causal(L, dt), **pads),
            dict(tgt_is_causal=True, **pads))
    ctor = dict(dim_feedforward=FF, dropout=0.0, batch_first=True)
    enc = tnn.TransformerEncoder(tnn.TransformerEncoderLayer(D, H, **ctor), 2, norm=tnn.LayerNorm(D))
    run("encoder of 2 with a norm", "encoder", enc, dt, ctor, [(N, L, D)],
        dict(mask=causal(L, dt), src_key_padding_mask=kpm_src))
    dec = tnn.TransformerDecoder(tnn.TransformerDecoderLayer(D, H, **ctor), 2, norm=tnn.LayerNorm(D))
    run("decoder of 2 with a norm", "decoder", dec, dt, ctor, [(N, L, D), (N, S, D)],
        dict(tgt_mask=causal(L, dt), memory_key_padding_mask=kpm_mem))
    tctor = dict(d_model=D, nhead=H, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=FF,
                 dropout=0.0)
    run("transformer", "transformer", tnn.Transformer(**tctor), dt, tctor, [(S, N, D), (L, N, D)],
        dict(tgt_mask=causal(L, dt), src_key_padding_mask=kpm_mem))
emit(cases)
]==])

local function tensors(t)
  local out = {}
  for k, v in pairs(t) do out[k] = type(v) == "table" and T.from_torch(v) or v end
  return out
end

local function build(c)
  local ctor = {}
  for k, v in pairs(c.ctor) do ctor[k] = v end
  if ctor.activation == "function gelu" then ctor.activation = dl.nn.functional.gelu end
  local d, h = 8, 2
  if c.op == "enc_layer" then return nn.TransformerEncoderLayer(d, h, ctor) end
  if c.op == "dec_layer" then return nn.TransformerDecoderLayer(d, h, ctor) end
  if c.op == "encoder" then
    return nn.TransformerEncoder(nn.TransformerEncoderLayer(d, h, ctor), 2, {norm = nn.LayerNorm(d)})
  end
  if c.op == "decoder" then
    return nn.TransformerDecoder(nn.TransformerDecoderLayer(d, h, ctor), 2, {norm = nn.LayerNorm(d)})
  end
  return nn.Transformer(ctor)
end

local function tol(dt)
  if dt == "float64" then return 1e-9, 1e-10 end
  return 2e-4, 2e-5
end

T.oracle_cases(data, tol, {"enc_layer", "dec_layer", "encoder", "decoder", "transformer"},
  function(c, rtol, atol, msg)
    msg = msg .. " " .. c.name
    local m = build(c):to(c.y.dtype)
    local sd = {}
    for k, v in pairs(c.sd) do sd[k] = T.from_torch(v) end
    m:load_state_dict(sd) -- strict: the keys are PyTorch's
    local xs = {}
    for i, rec in ipairs(c.xs) do xs[i] = T.from_torch(rec):requires_grad_() end
    local fwd = tensors(c.fwd)
    local args = {table.unpack(xs)}
    args[#args + 1] = fwd
    local y = m(table.unpack(args))
    T.match_torch(y, c.y, rtol, atol, msg .. " out")
    local wanted, names = {table.unpack(xs)}, {}
    for name, p in m:named_parameters() do
      names[#names + 1] = name
      wanted[#wanted + 1] = p
    end
    local g = dl.autograd.grad((y * T.from_torch(c.gy)):sum(), wanted)
    for i = 1, #xs do T.match_torch(g[i], c.gx[i], rtol, atol, msg .. " grad input " .. i) end
    for i, name in ipairs(names) do T.match_torch(g[#xs + i], c.gp[name], rtol, atol, msg .. " grad " .. name) end
  end)

T.case("a torch checkpoint converted to safetensors loads into TransformerEncoder", function()
  local dir = T.tmpdir() .. "/transformer_ckpt"
  os.execute("mkdir -p '" .. dir .. "'")
  local pth, st = dir .. "/enc.pth", dir .. "/enc.safetensors"
  local rec = T.torch(string.format([=[
import torch.nn as tnn
enc = tnn.TransformerEncoder(tnn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0,
                             batch_first=True, norm_first=True), 2, norm=tnn.LayerNorm(16)).eval()
torch.save({"model": enc.state_dict()}, %q)
x = mk((2, 7, 16), torch.float32)
pad = torch.tensor([[False] * 5 + [True] * 2, [False] * 7])
with torch.no_grad():
    y = enc(x, src_key_padding_mask=pad)
emit(dict(x=x, pad=pad, y=y))
]=], pth))
  T.truthy(os.execute(T.python() .. " ../../scripts/convert_torchvision.py --checkpoint '" .. pth ..
    "' --out '" .. st .. "' >/dev/null"), "convert_torchvision.py ran")
  local enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, {dim_feedforward = 32, dropout = 0,
    batch_first = true, norm_first = true}), 2, {norm = nn.LayerNorm(16)})
  enc:load_state_dict((dl.load(st)))
  enc:eval()
  local y = enc(T.from_torch(rec.x), {src_key_padding_mask = T.from_torch(rec.pad)})
  T.match_torch(y, rec.y, 2e-4, 2e-5, "converted encoder")
end)

T.done()

-- test_gpt_torch.lua - dl.models.GPT against its PyTorch twin
-- (scripts/gpt_torch.py, the model scripts/train_gpt.py and bench_text.py
-- run) with the same weights: dlua's state_dict is written as safetensors
-- with dl.save, loaded strictly by name into the torch model, and both run
-- the same ids (1-based here, 0-based there).  Compared: logits, the loss,
-- every parameter's gradient (the tied wte/lm_head one summed), in float64
-- and float32; the logits of a KV-cached forward (prompt, one token, a
-- chunk) in both frameworks; and the gradient-clipped AdamW step of
-- configure_optimizers (decay on 2-D weights only; float64).  Weights are perturbed
-- first so LayerNorm weights and biases are not trivial.
local T = require "testlib"

local dir = T.tmpdir()
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local scripts = here .. "/../../scripts"

local CFG = {vocab_size = 41, block_size = 12, n_layer = 2, n_head = 2, n_embd = 16}

local function model(dtype)
  dl.manual_seed(21)
  local m = dl.models.GPT(CFG)
  dl.no_grad(function()
    for _, p in ipairs(m:parameters()) do p:add_(dl.randn(p.shape) * 0.1) end
  end)
  return m:to(dtype)
end

local idx = dl.randint(1, 42, {3, 10})
local targets = dl.randint(1, 42, {3, 10})

local results = {}
local files = {}
for _, dt in ipairs {dl.float64, dl.float32} do
  local m = model(dt)
  local path = string.format("%s/gpt_torch_%s.safetensors", dir, dt.name)
  local tensors = {idx = idx, targets = targets}
  for k, v in pairs(m:state_dict()) do tensors["model." .. k] = v end
  dl.save(path, tensors)
  files[dt.name] = path
  results[dt.name] = m
end

local cfg_py = string.format("dict(vocab_size=%d, block_size=%d, n_layer=%d, n_head=%d, n_embd=%d)", CFG.vocab_size,
  CFG.block_size, CFG.n_layer, CFG.n_head, CFG.n_embd)

local data = T.torch(string.format([==[
sys.path.insert(0, %q)
from gpt_torch import GPT, load_safetensors
out = {}
for name in ("float64", "float32"):
    path = %q if name == "float64" else %q
    ts, _ = load_safetensors(path)
    m = GPT(**%s)
    dt = torch.float64 if name == "float64" else torch.float32
    m = m.to(dt)
    sd = {k[len("model."):]: v for k, v in ts.items() if k.startswith("model.")}
    m.load_state_dict(sd, strict=True)
    idx, tg = ts["idx"].long() - 1, ts["targets"].long() - 1
    logits, loss = m(idx, tg)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in m.named_parameters()}
    m.eval()
    with torch.no_grad():
        cache = m.new_cache(3)
        c1, _ = m(idx[:, :4], cache=cache)
        c2, _ = m(idx[:, 4:5], cache=cache)
        c3, _ = m(idx[:, 5:9], cache=cache)
        last, _ = m(idx, last_only=True)
    m.train()
    opt = m.configure_optimizers(0.1, 1e-2, (0.9, 0.95))
    torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
    opt.step()
    out[name] = dict(logits=logits, loss=loss, grads=grads, cached=[c1, c2, c3], last=last,
                     stepped={n: p.detach().clone() for n, p in m.named_parameters()})
emit(out)
]==], scripts, files.float64, files.float32, cfg_py))

for _, name in ipairs {"float64", "float32"} do
  local ref = data[name]
  local rtol, atol = 1e-10, 1e-12
  if name == "float32" then rtol, atol = 2e-4, 2e-5 end
  T.case("forward, loss and gradients vs torch, " .. name, function()
    local m = results[name]
    local logits, loss = m(idx, targets)
    T.match_torch(logits, ref.logits, rtol, atol, "logits")
    T.near(loss:item(), ref.loss.data[1], rtol * 10 + atol, "loss")
    loss:backward()
    local named = {}
    for k, p in m:named_parameters() do named[k] = p end
    local n = 0
    for k, g in pairs(ref.grads) do
      local key = k
      if named[key] == nil and key == "lm_head.weight" then key = "transformer.wte.weight" end
      T.truthy(named[key] ~= nil, "dlua has " .. k)
      T.match_torch(named[key].grad, g, rtol * 10, atol * 10, "grad " .. k)
      n = n + 1
    end
    T.truthy(n >= 20, "every parameter compared (" .. n .. ")")
  end)
  T.case("KV-cached forward vs torch's, " .. name, function()
    local m = results[name]
    m:eval()
    dl.no_grad(function()
      local cache = m:new_cache(3)
      T.match_torch(m(idx:narrow(2, 1, 4), {cache = cache}), ref.cached[1], rtol, atol, "prompt")
      T.match_torch(m(idx:narrow(2, 5, 1), {cache = cache}), ref.cached[2], rtol, atol, "one token")
      T.match_torch(m(idx:narrow(2, 6, 4), {cache = cache}), ref.cached[3], rtol, atol, "chunk")
      T.match_torch(m(idx, {last_only = true}), ref.last, rtol, atol, "last_only")
    end)
    m:train()
  end)
  -- Adam's first step is about lr * sign(g): in float32 the rounding of a
  -- near-zero gradient can flip it, so the step is compared in float64 only
  if name == "float64" then T.case("clipped AdamW step vs torch's, " .. name, function()
    local m = results[name]
    local opt = m:configure_optimizers{weight_decay = 0.1, lr = 1e-2, betas = {0.9, 0.95}}
    dl.nn.utils.clip_grad_norm_(m:parameters(), 0.5)
    opt:step()
    local named = {}
    for k, p in m:named_parameters() do named[k] = p end
    for k, w in pairs(ref.stepped) do
      local key = named[k] and k or "transformer.wte.weight"
      T.match_torch(named[key]:detach(), w, rtol * 10, atol * 10, "stepped " .. k)
    end
  end) end
end

T.done()

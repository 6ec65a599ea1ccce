-- test_gpt.lua - dl.models.GPT (lua/dl/models/gpt.lua): nanoGPT's state_dict
-- keys and weight tying (one parameter, one summed gradient), the
-- initialisation scale, the KV cache (logits of a cached run, one token or a
-- chunk at a time, equal the full forward's; cached and uncached generate()
-- give the same tokens for the same seed, with and without top-k and at
-- temperature 0), sampling (top-k 1 and temperature 0 are the argmax), the
-- optimizer groups (decay on 2-D weights only), a loss that falls in a few
-- AdamW steps, and bad input (ids out of range, too long, wrong cache, bad
-- options) raising errors that name the argument.
local T = require "testlib"
local gpt = dl.models.gpt

local function small(extra)
  local cfg = {vocab_size = 37, block_size = 16, n_layer = 2, n_head = 2, n_embd = 16}
  for k, v in pairs(extra or {}) do cfg[k] = v end
  return dl.models.GPT(cfg)
end

T.case("state_dict keys are nanoGPT's, lm_head tied to wte", function()
  dl.manual_seed(1)
  local m = small()
  local sd = m:state_dict()
  for _, k in ipairs {"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.1.ln_1.weight",
    "transformer.h.1.attn.c_attn.weight", "transformer.h.1.attn.c_attn.bias", "transformer.h.1.attn.c_proj.weight",
    "transformer.h.1.ln_2.bias", "transformer.h.1.mlp.c_fc.weight", "transformer.h.1.mlp.c_proj.bias",
    "transformer.ln_f.weight", "lm_head.weight"} do
    T.truthy(sd[k] ~= nil, "missing " .. k)
  end
  T.truthy(m.lm_head.weight == m.transformer.wte.weight, "lm_head.weight is wte.weight")
  local n = 0
  for _, p in ipairs(m:parameters()) do n = n + p:numel() end
  -- every parameter once: the tied matrix is not counted twice
  local expect = 37 * 16 + 16 * 16 + 2 * (4 * 16 + 16 * 48 + 48 + 16 * 16 + 16 + 16 * 64 + 64 + 64 * 16 + 16) + 2 * 16
  T.eq(n, expect, "parameter count")
  T.eq(m:get_num_params(), expect - 16 * 16, "get_num_params leaves out wpe")
  -- nanoGPT's init: N(0, 0.02), the residual projections smaller, biases 0
  local big = dl.models.GPT{vocab_size = 500, block_size = 64, n_layer = 4, n_head = 2, n_embd = 64}
  T.near(big.transformer.wte.weight:std():item(), 0.02, 0.002, "wte std")
  T.near(big.transformer.h[1].attn.c_proj.weight:std():item(), 0.02 / math.sqrt(8), 0.0015, "c_proj std")
  T.eq(big.transformer.h[2].mlp.c_fc.bias:abs():sum():item(), 0, "biases zero")
end)

T.case("the tied weight gets the sum of both uses' gradients", function()
  dl.manual_seed(2)
  local m = small()
  local x = dl.randint(1, 38, {2, 5})
  local y = dl.randint(1, 38, {2, 5})
  local _, loss = m(x, y)
  loss:backward()
  local g = m.transformer.wte.weight.grad:clone()
  -- the same gradient by hand: head use + embedding use with an untied copy
  dl.manual_seed(2)
  local u = small()
  local head = u.transformer.wte.weight:detach():clone():requires_grad_()
  u.lm_head.weight = head
  u:zero_grad()
  local _, l2 = u(x, y)
  l2:backward()
  T.close(g, u.transformer.wte.weight.grad + head.grad, 1e-5, 1e-7, "summed gradient")
  T.close(loss, l2, 1e-6, 0, "same loss")
end)

T.case("the KV cache gives the full forward's logits", function()
  dl.manual_seed(3)
  local m = small()
  m:eval()
  local idx = dl.randint(1, 38, {2, 12})
  dl.no_grad(function()
    local full = m(idx)
    local cache = m:new_cache(2)
    local a = m(idx:narrow(2, 1, 5), {cache = cache})
    T.close(a, full:narrow(2, 1, 5), 1e-5, 1e-6, "prompt")
    for t = 6, 8 do
      T.close(m(idx:narrow(2, t, 1), {cache = cache}), full:narrow(2, t, 1), 1e-5, 1e-6, "token " .. t)
    end
    T.eq(cache.len, 8, "cache length")
    -- a chunk after cached positions: the mask lets query i see pos + i keys
    T.close(m(idx:narrow(2, 9, 4), {cache = cache}), full:narrow(2, 9, 4), 1e-5, 1e-6, "chunk")
    local last = m(idx, {last_only = true})
    T.shape_eq(last, {2, 1, 37})
    T.close(last, full:narrow(2, 12, 1), 1e-6, 0, "last_only")
    T.raises(function() m(idx:narrow(2, 1, 5), {cache = cache}) end, "exceed block_size 16")
    T.raises(function() m(idx:narrow(1, 1, 1), {cache = m:new_cache(2)}) end, "the cache holds 2 sequences")
  end)
end)

T.case("cached and uncached generation give the same tokens", function()
  dl.manual_seed(4)
  local m = small()
  local prompt = dl.randint(1, 38, {2, 3})
  for _, o in ipairs {{temperature = 1.0}, {temperature = 0.8, top_k = 5}, {temperature = 0}} do
    dl.manual_seed(11)
    local a = m:generate(prompt, 13, {temperature = o.temperature, top_k = o.top_k, use_cache = true})
    dl.manual_seed(11)
    local b = m:generate(prompt, 13, {temperature = o.temperature, top_k = o.top_k, use_cache = false})
    T.shape_eq(a, {2, 16})
    T.truthy(dl.equal(a, b), "same tokens, temperature " .. o.temperature)
    T.truthy(dl.equal(a:narrow(2, 1, 3), prompt), "prompt kept")
    T.truthy(a:min():item() >= 1 and a:max():item() <= 37, "ids in range")
  end
  T.truthy(m.training, "training mode restored")
  -- past block_size the cache is refilled from the tail: still valid ids
  local long = m:generate(prompt, 30, {top_k = 3})
  T.shape_eq(long, {2, 33})
  T.truthy(long:min():item() >= 1 and long:max():item() <= 37, "ids in range past block_size")
end)

T.case("sampling: top-k 1 and temperature 0 take the argmax; top-k keeps k ids", function()
  dl.manual_seed(5)
  local logits = dl.randn(4, 30)
  local arg = logits:argmax(2):view(4, 1)
  T.truthy(dl.equal(gpt.sample(logits, 0), arg), "temperature 0")
  T.truthy(dl.equal(gpt.sample(logits, 1.0, 1), arg), "top_k 1")
  local top3 = logits:topk(3, 2)
  local seen = {}
  for _ = 1, 50 do
    local s = gpt.sample(logits, 2.0, 3)
    for r = 1, 4 do
      local id = s[r][1]:item()
      local ok = false
      for j = 1, 3 do ok = ok or logits[r][id]:item() >= top3[r][j]:item() end
      T.truthy(ok, "drawn id among the top 3")
      seen[id] = true
    end
  end
  local n = 0
  for _ in pairs(seen) do n = n + 1 end
  T.truthy(n > 4, "draws vary")
end)

T.case("configure_optimizers: weight decay on 2-D weights only; the loss falls", function()
  dl.manual_seed(6)
  local m = small()
  local opt = m:configure_optimizers{weight_decay = 0.1, lr = 3e-3, betas = {0.9, 0.95}}
  T.eq(#opt.param_groups, 2)
  for _, p in ipairs(opt.param_groups[1].params) do T.truthy(p:dim() >= 2, "decayed: matrices") end
  for _, p in ipairs(opt.param_groups[2].params) do T.eq(p:dim(), 1, "not decayed: vectors") end
  T.eq(opt.param_groups[1].weight_decay, 0.1)
  T.eq(opt.param_groups[2].weight_decay, 0.0)
  local x = dl.randint(1, 38, {4, 16})
  local y = x:roll(-1, 2)
  local first, last
  for i = 1, 30 do
    local _, loss = m(x, y)
    opt:zero_grad()
    loss:backward()
    dl.nn.utils.clip_grad_norm_(m:parameters(), 1.0)
    opt:step()
    if i == 1 then first = loss:item() end
    last = loss:item()
  end
  T.truthy(last < 0.7 * first, string.format("loss falls: %.3f -> %.3f", first, last))
end)

T.case("bad input names the argument", function()
  local m = small()
  T.raises(function() dl.models.GPT{vocab_size = 10, n_embd = 10, n_head = 3} end, "divisible by n_head")
  T.raises(function() dl.models.GPT{vocab_size = 10, wat = 1} end, "wat")
  T.raises(function() dl.models.GPT{vocab_size = 10, dropout = 1.5} end, "dropout")
  T.raises(function() m(dl.randint(1, 38, {1, 17})) end, "block size is only 16")
  T.raises(function() m(dl.randn(1, 4)) end, "integer token ids")
  T.raises(function() m(dl.randint(1, 38, {4})) end, "(batch, time)")
  T.raises(function() m(dl.tensor({{1, 38}})) end, "38")
  T.raises(function() m(dl.tensor({{0, 3}})) end, "0")
  T.raises(function() m(dl.randint(1, 38, {2, 4}), dl.randint(1, 38, {2, 3})) end, "targets have shape")
  T.raises(function() m:generate(dl.randint(1, 38, {1, 2}), 3, {top_k = 0}) end, "top_k")
  T.raises(function() m:generate(dl.randint(1, 38, {1, 2}), 3, {temperature = -1}) end, "temperature")
  T.raises(function() m:generate(dl.randint(1, 38, {1, 2}), -1) end, "max_new_tokens")
  -- the model is still usable
  local logits = m(dl.randint(1, 38, {1, 4}))
  T.shape_eq(logits, {1, 4, 37})
end)

T.done()

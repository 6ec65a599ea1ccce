-- test_clipgrad_torch.lua - gradient clipping against PyTorch's
-- torch.nn.utils.clip_grad_norm_ and clip_grad_value_: the returned total
-- norm and the clipped gradients for norm types 2, 1, 3.5, inf and 0, when
-- the norm is above max_norm (scaled) and below it (unchanged), over
-- gradients of several shapes and dtypes (float32, float64, one transposed),
-- and a model whose embedding weight is tied to its output head: one summed
-- gradient, counted once.
local T = require "testlib"

local data = T.torch([==[
F64 = torch.float64
for dt in (torch.float32, torch.float64):
    for p in (2.0, 1.0, 3.5, float("inf"), 0.0):
        for max_norm in (0.5, 1e6):
            grads = [torch.randn(s, dtype=F64).to(dt) for s in ((7, 5), (300,), (), (2, 3, 4))]
            params = [torch.zeros(g.shape, dtype=dt, requires_grad=True) for g in grads]
            for q, g in zip(params, grads):
                q.grad = g.clone()
            total = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=p)
            add(op="clip_grad_norm_", p="inf" if p == float("inf") else p, max_norm=max_norm,
                grads=grads, y=total, clipped=[q.grad for q in params])
    grads = [torch.randn(6, 4, dtype=F64).to(dt) * 3, torch.randn(10, dtype=F64).to(dt)]
    params = [torch.zeros(g.shape, dtype=dt, requires_grad=True) for g in grads]
    for q, g in zip(params, grads):
        q.grad = g.clone()
    torch.nn.utils.clip_grad_value_(params, 1.25)
    add(op="clip_grad_value_", grads=grads, y=params[0].grad, clipped=[q.grad for q in params])

# a tied model: embedding weight used as the output head
emb = torch.nn.Embedding(11, 4)
ids = torch.randint(0, 11, (3, 5))
logits = emb(ids) @ emb.weight.t()
torch.nn.functional.cross_entropy(logits.reshape(15, 11), torch.randint(0, 11, (15,))).backward()
g0 = emb.weight.grad.clone()
total = torch.nn.utils.clip_grad_norm_(emb.parameters(), 0.05)
add(op="tied", grads=[g0], y=total, clipped=[emb.weight.grad])
emit(cases)
]==])

T.oracle_cases(data, T.torch_tol, {"clip_grad_norm_", "clip_grad_value_", "tied"},
  function(c, rtol, atol, msg)
    local params = {}
    for i, g in ipairs(c.grads) do
      local grad = T.from_torch(g)
      if i == 1 and grad:dim() == 2 then grad = grad:t():contiguous():t() end -- a transposed grad
      params[i] = dl.zeros(grad.shape, {dtype = grad.dtype}):requires_grad_()
      params[i].grad = grad
    end
    if c.op == "clip_grad_value_" then
      T.eq(dl.nn.utils.clip_grad_value_(params, 1.25), nil, "returns nothing")
    else
      local list = c.op == "tied" and {params[1], params[1]} or params -- a tied weight counts once
      local total = dl.nn.utils.clip_grad_norm_(list, c.max_norm or 0.05, {norm_type = c.p})
      T.match_torch(total, c.y, rtol, atol, msg .. " total norm")
    end
    for i, want in ipairs(c.clipped) do
      T.match_torch(params[i].grad, want, rtol, atol, msg .. " clipped gradient " .. i)
    end
  end)

T.done()

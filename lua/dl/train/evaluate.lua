-- dl.train.evaluate: top-1 / top-5 accuracy and mean cross-entropy of a
-- classifier over a data loader, in evaluation mode without autograd.
--
--   local r = evaluate.run(model, loader, {device =, amp_dtype =, channels_last =,
--                                          on_batch = function(done, total) end})
--   -- r = {top1 =, top5 =, loss =, n =, k = 5}  (accuracies as fractions)
--
-- Invariants: the model is put in eval() mode and its previous mode
-- restored; labels are 1-based int64; top-k uses k = min(5, classes); an
-- empty loader gives n = 0 and NaN accuracies.
local dl = require "dl"

local E = {}

function E.run(model, loader, opts)
  opts = opts or {}
  local was_training = model.training
  model:eval()
  local correct1, correct5, loss_sum, n = 0, 0, 0, 0
  local k
  local total = #loader
  local ok, err = pcall(dl.no_grad, function()
    for b, x, y in loader:iter(opts.epoch) do
      if opts.device then
        x = x:to({device = opts.device, non_blocking = true})
        y = y:to({device = opts.device, non_blocking = true})
      end
      if opts.channels_last and x:dim() == 4 then x = x:contiguous({memory_format = "channels_last"}) end
      local logits
      if opts.amp_dtype then
        logits = dl.autocast({dtype = opts.amp_dtype}, model, x):float()
      else
        logits = model(x)
      end
      k = k or math.min(5, logits.shape[2])
      local loss = dl.nn.functional.cross_entropy(logits, y, {reduction = "sum"})
      loss_sum = loss_sum + loss:item()
      local _, idx = logits:topk(k, 2)
      local hits = idx:eq(y:view(-1, 1))
      correct1 = correct1 + hits:narrow(2, 1, 1):sum():item()
      correct5 = correct5 + hits:sum():item()
      n = n + y.shape[1]
      if opts.on_batch then opts.on_batch(b, total) end
    end
  end)
  if was_training then model:train() end
  if not ok then error(err, 0) end
  return {top1 = correct1 / n, top5 = correct5 / n, loss = loss_sum / n, n = n, k = k or 5}
end

return E

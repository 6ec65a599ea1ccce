-- dl.train.tensorboard: what the training programs log to TensorBoard
-- (train_resnet.lua --tensorboard DIR), on top of
-- dl.utils.tensorboard.SummaryWriter:
--   train/loss, train/lr            every step (global step = optimizer step)
--   train/images_per_s              every log_every steps (mean since the last)
--   inputs/1.. (a few images)       once, from the first batch, each min-max scaled to [0, 1]
--   val/top1, val/top5, val/loss, train/epoch_loss   every epoch (step = epoch)
--   weights/<parameter name>        a histogram of every parameter, every epoch
--
-- Invariants: logging never changes training (tensors are read, detached,
-- never written); the writer flushes every flush_secs (10) and at close, so
-- an interrupted run keeps all but the last seconds.
local dl = require "dl"

local L = {}
L.__index = L

-- open(dir, {log_every=, images=}) -> a logger
function L.open(dir, opts)
  opts = opts or {}
  local tb = require "dl.utils.tensorboard"
  local self = setmetatable({}, L)
  self.writer = tb.SummaryWriter(dir, {flush_secs = 10})
  self.log_every = opts.log_every or 100
  self.images = opts.images or 4
  self.t_mark, self.n_mark = dl.clock(), 0
  return self
end

-- After each optimizer step: loss (a number), lr, images in the batch.
function L:step(step, loss, lr, batch)
  local w = self.writer
  if loss ~= nil then w:add_scalar("train/loss", loss, step) end -- nil: not read this step (GPU)
  w:add_scalar("train/lr", lr, step)
  self.n_mark = self.n_mark + batch
  if step % self.log_every == 0 then
    local now = dl.clock()
    if now > self.t_mark then w:add_scalar("train/images_per_s", self.n_mark / (now - self.t_mark), step) end
    self.t_mark, self.n_mark = now, 0
  end
end

-- The first few images of a batch (N, C, H, W), once per run.
function L:inputs(x, step)
  if self.logged_inputs or x:dim() ~= 4 then return end
  self.logged_inputs = true
  local n = math.min(self.images, x.shape[1])
  for i = 1, n do
    local img = x[i]:detach():cpu():float()
    if img.shape[1] == 1 or img.shape[1] == 3 then
      local lo, hi = img:min():item(), img:max():item()
      img = hi > lo and img:sub(lo):div(hi - lo) or img:mul(0)
      self.writer:add_image("inputs/" .. i, img, step)
    end
  end
end

-- After an epoch: the epoch's mean loss, validation result r (or nil) and
-- the model's parameters as histograms.
function L:epoch(epoch, mean_loss, r, model)
  local w = self.writer
  if mean_loss and mean_loss == mean_loss then w:add_scalar("train/epoch_loss", mean_loss, epoch) end
  if r then
    w:add_scalar("val/top1", r.top1, epoch)
    w:add_scalar("val/top5", r.top5, epoch)
    w:add_scalar("val/loss", r.loss, epoch)
  end
  for name, p in model:named_parameters() do
    if p:numel() > 0 then w:add_histogram("weights/" .. name, p, epoch) end
  end
  w:flush()
end

function L:close() self.writer:close() end

return L

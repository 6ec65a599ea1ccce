-- dl.train.progress: what a training epoch prints.
--
--   local p = progress.new{epoch = 1, epochs = 10, total = #loader, log_every = 100,
--                          tty = progress.stdout_is_tty(), start = 0}
--   p:step(batch, images, loss, wait_seconds)   -- after every optimizer step
--   p:add_losses(sum, n)                        -- n steps' losses at once (loss nil above)
--   p:print("a line")                          -- prints above the bar
--   p:finish()                                  -- ends the bar, returns the epoch's stats
--
-- On a terminal one live bar per epoch is redrawn in place with "\r"
-- (batches done, images/s, share of time spent waiting for data, running
-- loss, ETA), at most 10 times a second.  Every `log_every` batches the
-- seed program's line "[epoch, batch] loss: x.xxx" (the mean loss of those
-- batches) is printed; when output is not a terminal that line carries the
-- bar's numbers after a "|" instead, so logs stay plain text.
--
-- Invariants: numbers shown are of this run only (a resumed epoch counts
-- from the batch it resumed at); the bar never wraps (it is cut to the
-- terminal width from $COLUMNS, 100 by default).
local dl = require "dl"

local P = {}
P.__index = P

local progress = {}

function progress.stdout_is_tty()
  if os.getenv("DL_PROGRESS") == "plain" then return false end
  if os.getenv("DL_PROGRESS") == "bar" then return true end
  return dl._train.isatty(1)
end

-- "1:02:03" or "2:03"
function progress.format_time(s)
  if s ~= s or s == math.huge or s < 0 then return "?" end
  s = math.floor(s + 0.5)
  local h, m, sec = s // 3600, (s % 3600) // 60, s % 60
  if h > 0 then return string.format("%d:%02d:%02d", h, m, sec) end
  return string.format("%d:%02d", m, sec)
end

function progress.new(o)
  local self = setmetatable({}, P)
  self.epoch, self.epochs, self.total = o.epoch, o.epochs, o.total
  self.log_every = o.log_every or 100
  self.tty = o.tty
  self.out = o.out or io.stdout
  self.start = o.start or 0
  self.done = self.start
  self.images, self.wait = 0, 0
  self.window_loss, self.window_n = 0, 0
  self.loss_sum, self.loss_n = 0, 0
  self.smooth = nil
  self.t0 = dl.clock()
  self.last_draw = -1
  self.drawn = false
  local cols = tonumber(os.getenv("COLUMNS") or "")
  self.width = (cols and cols >= 40) and math.floor(cols) - 1 or 99
  return self
end

function P:_stats()
  local elapsed = dl.clock() - self.t0
  local steps = self.done - self.start
  local rate = elapsed > 0 and self.images / elapsed or 0
  local wait = elapsed > 0 and self.wait / elapsed or 0
  local eta = steps > 0 and (self.total - self.done) * elapsed / steps or math.huge
  return elapsed, rate, wait, eta
end

function P:_bar_text()
  local elapsed, rate, wait, eta = self:_stats()
  local frac = self.total > 0 and self.done / self.total or 1
  local cells = 20
  local full = math.floor(frac * cells + 1e-9)
  local bar = string.rep("#", full) .. string.rep(".", cells - full)
  local s = string.format("epoch %d/%d [%s] %d/%d  %.0f img/s  data %2.0f%%  loss %s  %s %s",
    self.epoch, self.epochs, bar, self.done, self.total, rate, 100 * wait,
    self.smooth and string.format("%.3f", self.smooth) or "-",
    self.done >= self.total and "took" or "eta",
    progress.format_time(self.done >= self.total and elapsed or eta))
  if #s > self.width then s = s:sub(1, self.width) end
  return s
end

function P:_draw(force)
  if not self.tty then return end
  local now = dl.clock()
  if not force and now - self.last_draw < 0.1 then return end
  self.last_draw = now
  self.out:write("\r\27[K", self:_bar_text())
  self.out:flush()
  self.drawn = true
end

-- Prints a whole line, keeping the bar below it on a terminal.
function P:print(line)
  if self.tty and self.drawn then self.out:write("\r\27[K") end
  self.out:write(line, "\n")
  if self.tty and self.drawn then self.out:write(self:_bar_text()) end
  self.out:flush()
end

-- The losses of n steps, summing to sum, at once (a GPU loop reads its loss
-- sum only every log_every steps; its p:step calls pass loss nil).
function P:add_losses(sum, n)
  if n <= 0 then return end
  self.window_loss = self.window_loss + sum
  self.window_n = self.window_n + n
  self.loss_sum = self.loss_sum + sum
  self.loss_n = self.loss_n + n
  local mean = sum / n
  self.smooth = self.smooth and (0.9 * self.smooth + 0.1 * mean) or mean
end

-- One optimizer step: batch number (1-based, of the epoch), images in it,
-- its loss (nil: given by add_losses) and the seconds spent waiting for it.
function P:step(batch, images, loss, wait)
  self.done = batch
  self.images = self.images + images
  self.wait = self.wait + (wait or 0)
  if loss ~= nil then self:add_losses(loss, 1) end
  if batch % self.log_every == 0 and self.window_n > 0 then
    local line = string.format("[%d, %5d] loss: %.3f", self.epoch, batch, self.window_loss / self.window_n)
    self.window_loss, self.window_n = 0, 0
    if not self.tty then
      local _, rate, wait, eta = self:_stats()
      line = string.format("%s  | %d/%d  %.0f img/s  data %.0f%%  eta %s", line, batch, self.total, rate,
        100 * wait, progress.format_time(eta))
    end
    self:print(line)
  end
  self:_draw(false)
end

-- Ends the epoch's bar; returns {seconds, images_per_s, wait_share, mean_loss}.
function P:finish()
  local elapsed, rate, wait = self:_stats()
  if self.tty then
    self:_draw(true)
    self.out:write("\n")
    self.out:flush()
  end
  return {seconds = elapsed, images_per_s = rate, wait_share = wait,
    mean_loss = self.loss_n > 0 and self.loss_sum / self.loss_n or nil, images = self.images}
end

return progress

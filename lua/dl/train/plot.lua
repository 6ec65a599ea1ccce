-- dl.train.plot: the training chart written by `train_resnet.lua --plot`.
--
--   plot.training_curves(path, {losses = {...}, val = {{epoch=, top1=, top5=}, ...},
--                               title = "resnet18 on fashion-mnist", steps_per_epoch = 78})
--
-- Two panels side by side in one PNG: the training loss per step (raw, thin
-- and light, and a centred moving average) and the validation top-1 /
-- top-5 accuracy per epoch, each with axes, "nice" ticks (1, 2, 5 x 10^k),
-- grid lines, axis labels, a title and a legend.  Drawing goes through the
-- C primitives of dl._train (src/io/plot.c: anti-aliased lines, a 5x7 bitmap
-- font) into a uint8 3 x H x W tensor that dl.image.save writes.
--
-- Invariants: any input draws something legible - no data, one point, NaN
-- or infinite losses (skipped) - and nothing here changes its inputs.
local dl = require "dl"

local T = dl._train
local plot = {}

local WHITE = {255, 255, 255}
local BLACK = {0, 0, 0}
local GRID = {228, 228, 228}
local AXIS = {90, 90, 90}
local RAW = {160, 190, 230}
local SMOOTH = {25, 80, 170}
local TOP1 = {40, 150, 60}
local TOP5 = {230, 120, 20}
local VALLOSS = {190, 50, 50}

local FONT = 2 -- text scale: 12 x 16 pixels per character
local CH = 9 * FONT

-- Evenly spaced "nice" ticks covering [lo, hi]: returns lo', hi', step.
function plot.nice_ticks(lo, hi, n, integer)
  if hi < lo then lo, hi = hi, lo end
  if hi - lo < 1e-12 then
    local pad = math.abs(lo) > 0 and math.abs(lo) * 0.1 or 1
    lo, hi = lo - pad, hi + pad
  end
  local raw = (hi - lo) / math.max(1, n or 5)
  local mag = 10 ^ math.floor(math.log(raw, 10))
  local step
  for _, m in ipairs {1, 2, 2.5, 5, 10} do
    step = m * mag
    if step >= raw then break end
  end
  if integer and step < 1 then step = 1 end
  if integer then step = math.ceil(step) end
  local a = math.floor(lo / step + 1e-9) * step
  local b = math.ceil(hi / step - 1e-9) * step
  return a, b, step
end

local function tick_label(v, step)
  if math.abs(v) < step * 1e-6 then v = 0 end
  local dec = math.max(0, -math.floor(math.log(step, 10) + 1e-9))
  if step * 10 ^ dec % 1 > 1e-6 then dec = dec + 1 end
  return string.format("%." .. dec .. "f", v)
end

local function text(img, x, y, s, color, opts)
  opts = opts or {}
  local w = T.text_width(s, FONT)
  if opts.align == "center" then x = x - w / 2 elseif opts.align == "right" then x = x - w end
  if opts.valign == "middle" then y = y - CH / 2 end
  T.plot_text(img, math.floor(x), math.floor(y), s, color, FONT, false)
  if opts.bold then T.plot_text(img, math.floor(x) + 1, math.floor(y), s, color, FONT, false) end
end

-- A panel frame: axes, ticks, grid, labels.  Returns a mapper from data to
-- pixel coordinates.
local function panel(img, box, xr, yr, labels)
  local x0, y0, x1, y1 = box[1], box[2], box[3], box[4]
  local xlo, xhi, xstep = plot.nice_ticks(xr[1], xr[2], 6, true)
  if xr.exact then xlo, xhi = xr[1], xr[2] end
  local ylo, yhi, ystep = plot.nice_ticks(yr[1], yr[2], 5, false)
  if yr.clamp_hi and yhi > yr.clamp_hi then yhi = yr.clamp_hi end
  local function px(x) return x0 + (x - xlo) / (xhi - xlo) * (x1 - x0) end
  local function py(y) return y1 - (y - ylo) / (yhi - ylo) * (y1 - y0) end
  -- grid and ticks
  local v = math.ceil(xlo / xstep - 1e-9) * xstep
  while v <= xhi + 1e-9 * xstep do
    local x = px(v)
    T.plot_line(img, x, y0, x, y1, GRID, 1)
    T.plot_line(img, x, y1, x, y1 + 6, AXIS, 1.5)
    text(img, x, y1 + 10, tick_label(v, xstep), BLACK, {align = "center"})
    v = v + xstep
  end
  v = math.ceil(ylo / ystep - 1e-9) * ystep
  while v <= yhi + 1e-9 * ystep do
    local y = py(v)
    T.plot_line(img, x0, y, x1, y, GRID, 1)
    T.plot_line(img, x0 - 6, y, x0, y, AXIS, 1.5)
    text(img, x0 - 10, y, tick_label(v, ystep), BLACK, {align = "right", valign = "middle"})
    v = v + ystep
  end
  -- axes
  T.plot_line(img, x0, y1, x1, y1, AXIS, 1.5)
  T.plot_line(img, x0, y0, x0, y1, AXIS, 1.5)
  -- labels and title
  text(img, (x0 + x1) / 2, y1 + 36, labels.x, BLACK, {align = "center"})
  local lw = T.text_width(labels.y, FONT)
  T.plot_text(img, box[1] - 88, math.floor((y0 + y1) / 2 - lw / 2), labels.y, BLACK, FONT, true)
  text(img, (x0 + x1) / 2, y0 - 30, labels.title, BLACK, {align = "center", bold = true})
  return px, py, {xlo, xhi, ylo, yhi}
end

local function clip_line(img, ax, ay, bx, by, color, width, box)
  -- the segments stay inside the panel: cut at the box edges in y
  local top, bottom = box[2], box[4]
  if (ay < top and by < top) or (ay > bottom and by > bottom) then return end
  local function cut(x0, y0, x1, y1, yc)
    local t = (yc - y0) / (y1 - y0)
    return x0 + t * (x1 - x0), yc
  end
  if ay < top then ax, ay = cut(ax, ay, bx, by, top) end
  if by < top then bx, by = cut(bx, by, ax, ay, top) end
  if ay > bottom then ax, ay = cut(ax, ay, bx, by, bottom) end
  if by > bottom then bx, by = cut(bx, by, ax, ay, bottom) end
  T.plot_line(img, ax, ay, bx, by, color, width)
end

local function polyline(img, xs, ys, px, py, color, width, box)
  local prevx, prevy
  for i = 1, #xs do
    local y = ys[i]
    if y == y and y ~= math.huge and y ~= -math.huge then
      local x, yy = px(xs[i]), py(y)
      if prevx then clip_line(img, prevx, prevy, x, yy, color, width, box) end
      prevx, prevy = x, yy
    else
      prevx = nil
    end
  end
end

local function legend(img, entries, x, y, anchor)
  local w = 0
  for _, e in ipairs(entries) do w = math.max(w, T.text_width(e[1], FONT)) end
  w = w + 58
  local h = #entries * (CH + 10) + 10
  if anchor == "right" then x = x - w end
  if anchor == "bottom-right" then x, y = x - w, y - h end
  T.plot_rect(img, x, y, w, h, WHITE, 0.9)
  T.plot_line(img, x, y, x + w, y, AXIS, 1)
  T.plot_line(img, x, y + h, x + w, y + h, AXIS, 1)
  T.plot_line(img, x, y, x, y + h, AXIS, 1)
  T.plot_line(img, x + w, y, x + w, y + h, AXIS, 1)
  for i, e in ipairs(entries) do
    local ly = y + 10 + (i - 1) * (CH + 10) + CH / 2
    T.plot_line(img, x + 10, ly, x + 40, ly, e[2], e[3])
    text(img, x + 48, ly, e[1], BLACK, {valign = "middle"})
  end
end

-- Centred moving average over `window` points (non-finite values skipped;
-- the window shrinks at the ends), so the curve does not lag the raw one.
function plot.smooth(values, window)
  local n, half = #values, math.max(0, math.floor((window or 1) / 2))
  local ok = {}
  local csum, ccount = {[0] = 0}, {[0] = 0}
  for i = 1, n do
    local v = values[i]
    local good = v == v and v ~= math.huge and v ~= -math.huge
    ok[i] = good
    csum[i] = csum[i - 1] + (good and v or 0)
    ccount[i] = ccount[i - 1] + (good and 1 or 0)
  end
  local out = {}
  for i = 1, n do
    local a, b = math.max(1, i - half), math.min(n, i + half)
    local c = ccount[b] - ccount[a - 1]
    out[i] = (ok[i] and c > 0) and (csum[b] - csum[a - 1]) / c or 0 / 0
  end
  return out
end

local function finite_range(list, lo, hi)
  for _, v in ipairs(list) do
    if v == v and v ~= math.huge and v ~= -math.huge then
      lo = lo and math.min(lo, v) or v
      hi = hi and math.max(hi, v) or v
    end
  end
  return lo, hi
end

-- Renders the chart into a new uint8 3 x H x W tensor.
function plot.render_training_curves(d)
  local W, H = 1280, 560
  local img = dl.full({3, H, W}, 255, {dtype = dl.uint8})
  local top = 30
  if d.title then
    text(img, W / 2, 14, d.title, BLACK, {align = "center", bold = true})
    top = 44
  end
  -- left: training loss per step
  local losses = d.losses or {}
  local box = {110, top + 56, 610, H - 80}
  local xs = {}
  for i = 1, #losses do xs[i] = i end
  local smooth = plot.smooth(losses, math.max(3, #losses // 25))
  local lo, hi = finite_range(losses)
  if not lo then lo, hi = 0, 1 end
  -- a few spikes must not flatten the curve: the axis ends a bit above the
  -- smoothed curve's maximum and raw spikes are cut at the top
  local _, shi = finite_range(smooth)
  if shi and shi * 1.15 < hi then hi = shi * 1.15 end
  local px, py = panel(img, box, {1, math.max(2, #losses)}, {math.min(0, lo), hi},
    {x = "step", y = "loss", title = "Training loss"})
  polyline(img, xs, losses, px, py, RAW, 1, box)
  polyline(img, xs, smooth, px, py, SMOOTH, 2.5, box)
  if #losses == 0 then text(img, (box[1] + box[3]) / 2, (box[2] + box[4]) / 2, "no steps yet", AXIS, {align = "center"}) end
  legend(img, {{"raw", RAW, 2}, {"smoothed", SMOOTH, 3}}, box[3] - 8, box[2] + 8, "right")

  -- right: validation accuracy per epoch
  local val = d.val or {}
  local vbox = {770, top + 56, W - 40, H - 80}
  local ep, t1, t5 = {}, {}, {}
  for i, v in ipairs(val) do
    ep[i], t1[i], t5[i] = v.epoch, v.top1 * 100, v.top5 and v.top5 * 100 or 0 / 0
  end
  local alo, ahi = finite_range(t1)
  alo, ahi = finite_range(t5, alo, ahi)
  if not alo then alo, ahi = 0, 100 end
  local emax = 1
  for _, e in ipairs(ep) do emax = math.max(emax, e) end
  -- room below the curves for the legend (accuracies rise, so the bottom right is free)
  local below = math.max(0, alo - math.max(2, 0.6 * (ahi - alo)))
  local vx, vy = panel(img, vbox, {0, math.max(emax, 1)}, {below, math.min(100, ahi + 1), clamp_hi = 100},
    {x = "epoch", y = "accuracy (%)", title = "Validation accuracy"})
  polyline(img, ep, t5, vx, vy, TOP5, 2.5, vbox)
  polyline(img, ep, t1, vx, vy, TOP1, 2.5, vbox)
  for i = 1, #ep do
    for _, s in ipairs {{t5[i], TOP5}, {t1[i], TOP1}} do
      if s[1] == s[1] then
        local x, y = vx(ep[i]), vy(s[1])
        if y >= vbox[2] - 1 and y <= vbox[4] + 1 then T.plot_rect(img, x - 4, y - 4, 9, 9, s[2]) end
      end
    end
  end
  if #ep == 0 then
    text(img, (vbox[1] + vbox[3]) / 2, (vbox[2] + vbox[4]) / 2, "no validation (--val)", AXIS, {align = "center"})
  else
    local last = val[#val]
    local entries = {{string.format("top-1 (last %.2f%%)", last.top1 * 100), TOP1, 3}}
    if last.top5 then entries[2] = {string.format("top-5 (last %.2f%%)", last.top5 * 100), TOP5, 3} end
    legend(img, entries, vbox[3] - 8, vbox[4] - 8, "bottom-right")
  end
  return img
end

function plot.training_curves(path, d)
  local img = plot.render_training_curves(d)
  dl.image.save(img, path)
  return img
end

-- unused colour kept for callers that add the validation loss
plot.colors = {raw = RAW, smooth = SMOOTH, top1 = TOP1, top5 = TOP5, val_loss = VALLOSS}

return plot

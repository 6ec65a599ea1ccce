-- dl.train.guard: the training loop's checks on values that must stay finite.
--
--   guard.nonfinite(x)               -> nil, or "NaN" / "+inf" / "-inf"
--   guard.check_loss(loss, where)    -> loss (a number or a one-element
--                                       tensor, as a number); raises
--                                       "the loss became NaN at <where> ..."
--                                       at the first non-finite value
--
-- Used by a training loop to stop with one clear line at the first non-finite
-- loss (scripts/train_resnet.lua's --stop-on-nonfinite) before the optimizer
-- step spreads it into the weights and the next checkpoint.  Invariants: never
-- changes its argument; the error is a plain string (level 0) so a program's
-- die() prints it as one line.
local dl = require "dl"

local G = {}

function G.nonfinite(x)
  if x ~= x then return "NaN" end
  if x == math.huge then return "+inf" end
  if x == -math.huge then return "-inf" end
  return nil
end

function G.check_loss(loss, where)
  local v = loss
  if dl.is_tensor(loss) then
    if loss:numel() ~= 1 then
      error(string.format("check_loss: the loss has %d elements, expected one", loss:numel()), 2)
    end
    v = loss:item()
  elseif type(loss) ~= "number" then
    error("check_loss: the loss is a " .. type(loss) .. ", expected a number or a tensor", 2)
  end
  local bad = G.nonfinite(v)
  if bad then
    error(string.format("the loss became %s at %s (stopping at the first non-finite loss; try a lower "
      .. "learning rate, or look for bad inputs or labels in that batch)", bad, where or "this step"), 0)
  end
  return v
end

return G

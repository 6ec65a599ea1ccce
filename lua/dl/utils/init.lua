-- dl.utils: PyTorch's torch.utils namespace.  Its submodules load on first
-- access (dl.utils.tensorboard -> require "dl.utils.tensorboard"), so
-- requiring dl.utils costs nothing.  (dl.util, singular, is the library's
-- internal helper module and unrelated.)
local submodules = {tensorboard = true}

return setmetatable({}, {
  __index = function(t, k)
    if submodules[k] then
      local m = require("dl.utils." .. k)
      rawset(t, k, m)
      return m
    end
  end,
})

-- dl.nn losses: CrossEntropyLoss, NLLLoss, MSELoss, L1Loss, BCEWithLogitsLoss.
--
-- Constructors take PyTorch's keyword arguments as an options table
-- (dl.nn.CrossEntropyLoss{weight=w, ignore_index=-100, reduction="mean",
-- label_smoothing=0}).  Class weights and pos_weight are registered as
-- buffers, as in PyTorch (so they follow to() and appear in state_dict).
-- Class indices in targets are 1-based.
local dl = require "dl"
local util = require "dl.util"
local Module = require "dl.nn.module"
local F = require "dl.nn.functional"

local fail = util.fail
local Loss = {}

local REDUCTIONS = {"none", "mean", "sum"}

local function base(self, name, opts, keys)
  opts = util.check_options(opts, name, keys)
  self.reduction = util.check_string(opts.reduction or "mean", name, "reduction", REDUCTIONS)
  return opts
end

local function opt_tensor(v, name, what)
  if v ~= nil and not dl.is_tensor(v) then fail("%s: %s must be a tensor, got %s", name, what, type(v)) end
  return v
end

Loss.CrossEntropyLoss = Module:extend("CrossEntropyLoss")
function Loss.CrossEntropyLoss:__init(opts)
  local name = "CrossEntropyLoss"
  opts = base(self, name, opts, {"weight", "ignore_index", "reduction", "label_smoothing"})
  self:register_buffer("weight", opt_tensor(opts.weight, name, "weight"))
  self.ignore_index = util.check_int(opts.ignore_index or -100, name, "ignore_index")
  self.label_smoothing = util.check_number(opts.label_smoothing or 0.0, name, "label_smoothing")
  if self.label_smoothing < 0 or self.label_smoothing > 1 then
    fail("CrossEntropyLoss: label_smoothing must be between 0.0 and 1.0, got %s", util.pyrepr(self.label_smoothing))
  end
end
function Loss.CrossEntropyLoss:forward(input, target)
  local o = {ignore_index = self.ignore_index, reduction = self.reduction}
  if self.weight ~= nil then o.weight = self.weight end
  if self.label_smoothing ~= 0 then o.label_smoothing = self.label_smoothing end
  return F.cross_entropy(input, target, o)
end

Loss.NLLLoss = Module:extend("NLLLoss")
function Loss.NLLLoss:__init(opts)
  local name = "NLLLoss"
  opts = base(self, name, opts, {"weight", "ignore_index", "reduction"})
  self:register_buffer("weight", opt_tensor(opts.weight, name, "weight"))
  self.ignore_index = util.check_int(opts.ignore_index or -100, name, "ignore_index")
end
function Loss.NLLLoss:forward(input, target)
  local o = {ignore_index = self.ignore_index, reduction = self.reduction}
  if self.weight ~= nil then o.weight = self.weight end
  return F.nll_loss(input, target, o)
end

-- A loss module whose one option is reduction, computing F[fname].
local function reduction_only(name, fname)
  local C = Module:extend(name)
  function C:__init(opts)
    base(self, name, opts, {"reduction"})
  end
  function C:forward(input, target)
    return F[fname](input, target, {reduction = self.reduction})
  end
  return C
end

Loss.MSELoss = reduction_only("MSELoss", "mse_loss")
Loss.L1Loss = reduction_only("L1Loss", "l1_loss")

Loss.BCEWithLogitsLoss = Module:extend("BCEWithLogitsLoss")
function Loss.BCEWithLogitsLoss:__init(opts)
  local name = "BCEWithLogitsLoss"
  opts = base(self, name, opts, {"weight", "pos_weight", "reduction"})
  self:register_buffer("weight", opt_tensor(opts.weight, name, "weight"))
  self:register_buffer("pos_weight", opt_tensor(opts.pos_weight, name, "pos_weight"))
end
function Loss.BCEWithLogitsLoss:forward(input, target)
  local o = {reduction = self.reduction}
  if self.weight ~= nil then o.weight = self.weight end
  if self.pos_weight ~= nil then o.pos_weight = self.pos_weight end
  return F.binary_cross_entropy_with_logits(input, target, o)
end

return Loss

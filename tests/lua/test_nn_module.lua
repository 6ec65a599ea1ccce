-- test_nn_module.lua - dl.nn: the Module API (registration, names, traversal,
-- train/eval, to(dtype), zero_grad, apply, state_dict round trips and
-- load_state_dict errors), printing against PyTorch's text, layers and losses
-- against PyTorch, dl.nn.init statistics, and bad input.
local T = require "testlib"
local nn = dl.nn

-- --- the oracle (one Python call) -------------------------------------------

local R = T.torch([==[
import torch
import torch.nn as nn
import torch.nn.functional as F
from collections import OrderedDict
torch.manual_seed(0)
out = {}

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(OrderedDict([
            ("conv", nn.Conv2d(3, 8, 3, padding="same", dilation=2, bias=False, padding_mode="reflect")),
            ("bn", nn.BatchNorm2d(8, eps=1e-3, momentum=None, affine=False)),
            ("act", nn.ReLU()),
        ]))
        self.blocks = nn.ModuleList([nn.Conv2d(8, 16, (3, 5), stride=(2, 1), padding=(1, 2), groups=4),
                                     nn.Sequential()])
        self.pool = nn.MaxPool2d((2, 3), stride=1, padding=(1, 1), dilation=2, ceil_mode=True)
        self.avg = nn.AvgPool2d(2)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Sequential(nn.Dropout(0.25), nn.Identity(), nn.Linear(16, 4, bias=False),
                                  nn.BatchNorm1d(4), nn.ReLU(inplace=True))
        self.loss = nn.CrossEntropyLoss()
        self.mse = nn.MSELoss()
        self.scale = 3
out["net_str"] = str(Net())

lin = nn.Linear(5, 3)
x = torch.randn(4, 5)
x3 = torch.randn(2, 3, 5)
out["linear"] = {"weight": lin.weight, "bias": lin.bias, "x": x, "y": lin(x), "x3": x3, "y3": lin(x3)}

bn = nn.BatchNorm2d(3)
x1 = torch.randn(4, 3, 5, 5) * 2 + 1
x2 = torch.randn(4, 5, 3, 5).transpose(1, 2)  # non-contiguous
y1 = bn(x1); y2 = bn(x2)
rec = {"x1": x1, "x2": x2.contiguous(), "y1": y1, "y2": y2, "mean": bn.running_mean.clone(),
       "var": bn.running_var.clone(), "nbt": bn.num_batches_tracked.clone()}
bn.eval()
rec["y3"] = bn(x1)
bnc = nn.BatchNorm2d(3, momentum=None)
for _ in range(3):
    bnc(x1); bnc(x2)
rec["cum_mean"] = bnc.running_mean; rec["cum_var"] = bnc.running_var
bn1 = nn.BatchNorm1d(3)
xb = torch.randn(6, 3)
rec["bn1_x"] = xb; rec["bn1_y"] = bn1(xb); rec["bn1_mean"] = bn1.running_mean
out["bn"] = rec

logits = torch.randn(6, 5)
target = torch.tensor([0, 4, 2, 2, 1, 3])
w = torch.rand(5) + 0.5
lg3 = torch.randn(3, 5, 4)
tg3 = torch.randint(0, 5, (3, 4))
out["loss"] = {
  "logits": logits, "target": target, "w": w, "lg3": lg3, "tg3": tg3,
  "ce": nn.CrossEntropyLoss()(logits, target),
  "ce_w": nn.CrossEntropyLoss(weight=w)(logits, target),
  "ce_ign": nn.CrossEntropyLoss(weight=w, ignore_index=2)(logits, target),
  "ce_sum": nn.CrossEntropyLoss(reduction="sum")(logits, target),
  "ce_none": nn.CrossEntropyLoss(reduction="none", ignore_index=2)(logits, target),
  "ce3": nn.CrossEntropyLoss()(lg3, tg3),
  "nll": nn.NLLLoss(weight=w)(F.log_softmax(logits, 1), target),
  "softmax": nn.Softmax(dim=1)(logits), "log_softmax": nn.LogSoftmax(dim=0)(logits),
}
a = torch.randn(3, 4); b = torch.randn(3, 4); bt = torch.rand(3, 4)
pw = torch.rand(4) + 0.5; bw = torch.rand(3, 1)
out["loss2"] = {
  "a": a, "b": b, "bt": bt, "pw": pw, "bw": bw,
  "mse": nn.MSELoss()(a, b), "mse_sum": nn.MSELoss(reduction="sum")(a, b),
  "l1": nn.L1Loss()(a, b), "l1_none": nn.L1Loss(reduction="none")(a, b),
  "bce": nn.BCEWithLogitsLoss()(a * 5, bt),
  "bce_pw": nn.BCEWithLogitsLoss(weight=bw, pos_weight=pw, reduction="sum")(a * 5, bt),
}
out["gains"] = [nn.init.calculate_gain(n) for n in ["linear", "conv2d", "sigmoid", "tanh", "relu", "leaky_relu", "selu"]] + \
               [nn.init.calculate_gain("leaky_relu", 0.2)]
emit(out)
]==])

-- --- Module API -----------------------------------------------------------------

local Block = nn.Module:extend("Block")
function Block:__init(c)
  self.conv = nn.Conv2d(c, c, 3, {padding = 1, bias = false})
  self.bn = nn.BatchNorm2d(c)
  self.scale = dl.ones(c):requires_grad_(true) -- a tensor that requires grad: a parameter
  self.note = "plain attribute"
  self.table_attr = {1, 2}
  self.mask = dl.ones(c)                           -- no grad: a plain attribute
end

local Net = nn.Module:extend("Net")
function Net:__init()
  self.stem = nn.Linear(4, 6)
  self.blocks = nn.Sequential(Block(2), Block(2))
  self.head = nn.Sequential{{"fc", nn.Linear(6, 3)}, {"act", nn.ReLU()}}
  self.tied = self.stem -- the same module twice: listed once
  self:register_buffer("steps", dl.tensor(0))
  self:register_buffer("cache", dl.zeros(2), {persistent = false})
end
function Net:forward(x) return self.head(self.stem(x)) end

T.case("registration and names", function()
  local net = Net()
  local names = {}
  for name, p in net:named_parameters() do
    names[#names + 1] = name
    T.truthy(p.requires_grad, name .. " requires grad")
  end
  T.eq(table.concat(names, " "), "stem.weight stem.bias blocks.0.scale blocks.0.conv.weight blocks.0.bn.weight " ..
    "blocks.0.bn.bias blocks.1.scale blocks.1.conv.weight blocks.1.bn.weight blocks.1.bn.bias head.fc.weight head.fc.bias")
  T.eq(#net:parameters(), 12)
  T.eq(net:num_parameters(), 4 * 6 + 6 + 2 * (2 + 2 * 2 * 9 + 2 + 2) + 6 * 3 + 3)
  T.eq(nn.utils.count_parameters(net), net:num_parameters())
  local bufs = {}
  for name, b in net:named_buffers() do bufs[#bufs + 1] = name .. ":" .. b.dtype.name end
  T.eq(table.concat(bufs, " "), "steps:int64 cache:float32 blocks.0.bn.running_mean:float32 " ..
    "blocks.0.bn.running_var:float32 blocks.0.bn.num_batches_tracked:int64 blocks.1.bn.running_mean:float32 " ..
    "blocks.1.bn.running_var:float32 blocks.1.bn.num_batches_tracked:int64")
  T.eq(#net:buffers(), 8)
  local kids = {}
  for name, m in net:named_children() do kids[#kids + 1] = name .. "=" .. m:_get_name() end
  T.eq(table.concat(kids, " "), "stem=Linear blocks=Sequential head=Sequential")
  T.eq(#net:children(), 3)
  local mods = {}
  for name, m in net:named_modules() do mods[#mods + 1] = (name == "" and "<root>" or name) end
  T.eq(table.concat(mods, " "), "<root> stem blocks blocks.0 blocks.0.conv blocks.0.bn blocks.1 blocks.1.conv " ..
    "blocks.1.bn head head.fc head.act")
  T.eq(#net:modules(), 12)
  -- plain attributes stay plain
  T.eq(net.blocks[1].note, "plain attribute")
  T.eq(net.blocks[1].table_attr[2], 2)
  T.truthy(dl.is_tensor(net.blocks[1].mask))
  T.eq(net.blocks[1].mask.requires_grad, false)
  -- containers: 1-based integer access, #, ipairs, names "0", "1"
  T.eq(#net.blocks, 2)
  T.eq(net.blocks[1], net.blocks["0"])
  T.eq(net.blocks[-1], net.blocks["1"])
  T.eq(net.blocks[3], nil)
  local n = 0
  for i, b in ipairs(net.blocks) do n = n + 1 T.eq(b:_get_name(), "Block") T.eq(i, n) end
  T.eq(n, 2)
  T.eq(net.head.fc.out_features, 3)
  T.truthy(net.blocks[1]:isinstance(Block) and net.blocks[1]:isinstance(nn.Module))
  T.truthy(not net.stem:isinstance(nn.Conv2d))
  -- reassigning replaces in place, keeping the order; nil removes from listings
  net.stem = nn.Linear(4, 6, {bias = false})
  T.eq(select(1, net:named_parameters()()), "stem.weight")
  net.head.fc.bias = nil
  local count, tied = 0, 0
  for name in net:named_parameters() do
    count = count + 1
    T.truthy(name ~= "head.fc.bias")
    if name:match("^tied%.") then tied = tied + 1 end
  end
  -- the old stem lives on as `tied` (weight and bias); the new stem has no bias
  T.eq(count, 12)
  T.eq(tied, 2)
  -- named_parameters with a prefix and without recursion
  local own = {}
  for name in net.blocks[1]:named_parameters({prefix = "b", recurse = false}) do own[#own + 1] = name end
  T.eq(table.concat(own, " "), "b.scale")
end)

T.case("shared parameters are listed once", function()
  local a = nn.Linear(3, 3)
  local m = nn.Sequential(a, nn.ReLU(), a)
  T.eq(#m:parameters(), 2)
  local b = nn.Linear(3, 3)
  b.weight = a.weight
  local s = nn.Sequential(a, b)
  local names = {}
  for name in s:named_parameters() do names[#names + 1] = name end
  T.eq(table.concat(names, " "), "0.weight 0.bias 1.bias")
end)

T.case("train/eval, apply, zero_grad, requires_grad_", function()
  local net = Net()
  T.eq(net.training, true)
  net:eval()
  for _, m in ipairs(net:modules()) do T.eq(m.training, false) end
  net:train()
  for _, m in ipairs(net:modules()) do T.eq(m.training, true) end
  net.blocks:train(false)
  T.eq(net.training, true)
  T.eq(net.blocks[2].bn.training, false)
  local seen = {}
  net:apply(function(m) seen[#seen + 1] = m:_get_name() end)
  T.eq(seen[#seen], "Net")
  T.eq(seen[1], "Linear")
  T.eq(#seen, 12)
  -- zero_grad: set_to_none by default, or zero in place
  for _, p in ipairs(net:parameters()) do p.grad = dl.ones_like(p) end
  net:zero_grad({set_to_none = false})
  T.tensor_eq(net.stem.weight.grad, dl.zeros(6, 4))
  net:zero_grad()
  for _, p in ipairs(net:parameters()) do T.eq(p.grad, nil) end
  net:requires_grad_(false)
  for _, p in ipairs(net:parameters()) do T.eq(p.requires_grad, false) end
  T.eq(net:num_parameters({trainable_only = true}), 0)
end)

T.case("to(dtype) converts floating parameters and buffers in place", function()
  local net = Net()
  net.stem.weight.grad = dl.ones(6, 4)
  local w_before = net.stem.weight:clone()
  T.eq(net:to(dl.float64), net)
  for name, p in net:named_parameters() do
    T.eq(p.dtype, dl.float64, name)
    T.truthy(p.requires_grad, name .. " keeps requires_grad")
  end
  T.eq(net.stem.weight.grad.dtype, dl.float64)
  T.tensor_eq(net.stem.weight, w_before)
  T.eq(net.blocks[1].bn.running_mean.dtype, dl.float64)
  T.eq(net.blocks[1].bn.num_batches_tracked.dtype, dl.int64)
  T.eq(net.steps.dtype, dl.int64)
  T.eq(net.cache.dtype, dl.float64)
  net:to("float32")
  T.eq(net.head.fc.weight.dtype, dl.float32)
  net:double()
  T.eq(net.head.fc.weight.dtype, dl.float64)
  net:to({dtype = dl.float32, device = "cpu"})
  T.eq(net.head.fc.weight.dtype, dl.float32)
  T.eq(net.head.fc.weight.device, "cpu")
  local y = net(dl.randn(2, 4))
  T.shape_eq(y, {2, 3})
end)

T.case("state_dict and a round trip into a fresh model", function()
  local net = Net()
  local sd = net:state_dict()
  local keys = {}
  for k in pairs(sd) do keys[#keys + 1] = k end
  T.eq(table.concat(keys, " "), "steps stem.weight stem.bias blocks.0.scale blocks.0.conv.weight " ..
    "blocks.0.bn.weight blocks.0.bn.bias blocks.0.bn.running_mean blocks.0.bn.running_var " ..
    "blocks.0.bn.num_batches_tracked blocks.1.scale blocks.1.conv.weight blocks.1.bn.weight blocks.1.bn.bias " ..
    "blocks.1.bn.running_mean blocks.1.bn.running_var blocks.1.bn.num_batches_tracked head.fc.weight head.fc.bias " ..
    "tied.weight tied.bias") -- like PyTorch, a module reachable twice is saved under both names
  T.eq(sd["blocks.0.bn.num_batches_tracked"].dtype, dl.int64)
  T.eq(sd["blocks.0.bn.num_batches_tracked"]:dim(), 0)
  T.eq(sd["stem.weight"].requires_grad, false)
  T.eq(sd.cache, nil) -- not persistent
  -- shares storage with the parameter
  sd["stem.bias"]:fill_(7)
  T.tensor_eq(net.stem.bias, {7, 7, 7, 7, 7, 7})
  local other = Net()
  net.blocks[1].bn.running_var:fill_(3)
  net.blocks[1].bn.num_batches_tracked:fill_(5)
  local missing, unexpected = other:load_state_dict(net:state_dict())
  T.eq(#missing, 0)
  T.eq(#unexpected, 0)
  for k, v in pairs(net:state_dict()) do T.tensor_eq(other:state_dict()[k], v, 0, k) end
  T.eq(other.blocks[1].bn.num_batches_tracked:item(), 5)
  -- loading copies: the tensors stay distinct objects
  T.truthy(other.stem.weight ~= net.stem.weight)
  dl.no_grad(function() other.stem.weight:fill_(0) end)
  T.truthy(net.stem.weight:abs():sum():item() > 0)
end)

T.case("load_state_dict errors list every problem", function()
  local net = Net()
  local sd = net:state_dict()
  local bad = {}
  for k, v in pairs(sd) do bad[k] = v end
  bad["stem.bias"] = nil
  bad["head.fc.weight"] = dl.zeros(4, 6)
  bad["extra.weight"] = dl.zeros(1)
  bad["blocks.0.bn.unknown"] = dl.zeros(1)
  local err = T.raises(function() net:load_state_dict(bad) end, "Error(s) in loading state_dict for Net:")
  T.truthy(err:find('Missing key(s) in state_dict: "stem.bias".', 1, true), err)
  T.truthy(err:find('Unexpected key(s) in state_dict: "blocks.0.bn.unknown", "extra.weight".', 1, true), err)
  T.truthy(err:find("size mismatch for head.fc.weight: copying a param with shape [4, 6] from checkpoint, " ..
    "the shape in current model is [3, 6].", 1, true), err)
  -- non-strict: missing/unexpected returned, size mismatch still an error
  bad["head.fc.weight"] = sd["head.fc.weight"]
  local missing, unexpected = net:load_state_dict(bad, {strict = false})
  T.eq(table.concat(missing, ","), "stem.bias")
  T.eq(table.concat(unexpected, ","), "blocks.0.bn.unknown,extra.weight")
  T.raises(function() net:load_state_dict({["stem.weight"] = "x"}, {strict = false}) end,
    'expected a tensor from checkpoint but received string')
  T.raises(function() net:load_state_dict(sd, {strcit = false}) end, "load_state_dict: unknown option 'strcit'")
  T.raises(function() net:load_state_dict(5) end, "expected a table of name -> tensor")
end)

-- --- printing ---------------------------------------------------------------------

T.case("tostring matches PyTorch's print(model)", function()
  local Mixed = nn.Module:extend("Net")
  function Mixed:__init()
    self.features = nn.Sequential{
      {"conv", nn.Conv2d(3, 8, 3, {padding = "same", dilation = 2, bias = false, padding_mode = "reflect"})},
      {"bn", nn.BatchNorm2d(8, {eps = 1e-3, momentum = false, affine = false})},
      {"act", nn.ReLU()},
    }
    self.blocks = nn.ModuleList{nn.Conv2d(8, 16, {3, 5}, {stride = {2, 1}, padding = {1, 2}, groups = 4}),
      nn.Sequential()}
    self.pool = nn.MaxPool2d({2, 3}, {stride = 1, padding = {1, 1}, dilation = 2, ceil_mode = true})
    self.avg = nn.AvgPool2d(2)
    self.gap = nn.AdaptiveAvgPool2d(1)
    self.head = nn.Sequential(nn.Dropout(0.25), nn.Identity(), nn.Linear(16, 4, {bias = false}),
      nn.BatchNorm1d(4), nn.ReLU({inplace = true}))
    self.loss = nn.CrossEntropyLoss()
    self.mse = nn.MSELoss()
    self.scale = 3
  end
  T.eq(tostring(Mixed()), R.net_str)
  T.eq(tostring(nn.Flatten()), "Flatten(start_dim=2, end_dim=-1)")
  T.eq(tostring(nn.Softmax(-1)), "Softmax(dim=-1)")
  T.eq(tostring(nn.Dropout()), "Dropout(p=0.5, inplace=False)")
  T.eq(tostring(nn.Linear(2, 3)), "Linear(in_features=2, out_features=3, bias=True)")
end)

-- --- layers and losses against PyTorch ------------------------------------------------

local F = T.from_torch

T.case("Linear forward", function()
  local r = R.linear
  local lin = nn.Linear(5, 3)
  lin:load_state_dict({weight = F(r.weight), bias = F(r.bias)})
  T.match_torch(lin(F(r.x)), r.y, 1e-5, 1e-6)
  T.match_torch(lin(F(r.x3)), r.y3, 1e-5, 1e-6)
  T.match_torch(lin(F(r.x):t():contiguous():t()), r.y, 1e-5, 1e-6, "non-contiguous input")
end)

T.case("BatchNorm2d: batch stats, running stats, num_batches_tracked, eval, momentum=None", function()
  local r = R.bn
  local bn = nn.BatchNorm2d(3)
  T.match_torch(bn(F(r.x1)), r.y1, 1e-4, 1e-5, "y1")
  T.match_torch(bn(F(r.x2)), r.y2, 1e-4, 1e-5, "y2")
  T.match_torch(bn.running_mean, r.mean, 1e-5, 1e-6, "running_mean")
  T.match_torch(bn.running_var, r.var, 1e-5, 1e-6, "running_var")
  T.match_torch(bn.num_batches_tracked, r.nbt, 0, 0, "num_batches_tracked")
  bn:eval()
  T.match_torch(bn(F(r.x1)), r.y3, 1e-4, 1e-5, "eval")
  T.eq(bn.num_batches_tracked:item(), 2, "eval does not count batches")
  local bnc = nn.BatchNorm2d(3, {momentum = false})
  for _ = 1, 3 do
    bnc(F(r.x1))
    bnc(F(r.x2))
  end
  T.match_torch(bnc.running_mean, r.cum_mean, 1e-5, 1e-6, "cumulative mean")
  T.match_torch(bnc.running_var, r.cum_var, 1e-5, 1e-6, "cumulative var")
  local bn1 = nn.BatchNorm1d(3)
  T.match_torch(bn1(F(r.bn1_x)), r.bn1_y, 1e-4, 1e-5, "BatchNorm1d")
  T.match_torch(bn1.running_mean, r.bn1_mean, 1e-5, 1e-6, "BatchNorm1d running_mean")
  -- initial values
  local fresh = nn.BatchNorm2d(4)
  T.tensor_eq(fresh.weight, {1, 1, 1, 1})
  T.tensor_eq(fresh.bias, {0, 0, 0, 0})
  T.tensor_eq(fresh.running_mean, {0, 0, 0, 0})
  T.tensor_eq(fresh.running_var, {1, 1, 1, 1})
  T.eq(fresh.num_batches_tracked:item(), 0)
  local plain = nn.BatchNorm2d(4, {affine = false, track_running_stats = false})
  T.eq(plain.weight, nil)
  T.eq(#plain:parameters(), 0)
  T.eq(#plain:buffers(), 0)
  T.shape_eq(plain(dl.randn(2, 4, 3, 3)), {2, 4, 3, 3})
end)

T.case("losses and softmax layers", function()
  local r = R.loss
  local logits, w = F(r.logits), F(r.w)
  local target = F(r.target) + 1 -- 1-based classes
  T.match_torch(nn.CrossEntropyLoss()(logits, target), r.ce, 1e-5, 1e-6, "ce")
  T.match_torch(nn.CrossEntropyLoss({weight = w})(logits, target), r.ce_w, 1e-5, 1e-6, "ce weight")
  T.match_torch(nn.CrossEntropyLoss({weight = w, ignore_index = 3})(logits, target), r.ce_ign, 1e-5, 1e-6, "ce ignore")
  T.match_torch(nn.CrossEntropyLoss({reduction = "sum"})(logits, target), r.ce_sum, 1e-5, 1e-6, "ce sum")
  T.match_torch(nn.CrossEntropyLoss({reduction = "none", ignore_index = 3})(logits, target), r.ce_none, 1e-5, 1e-6,
    "ce none")
  T.match_torch(nn.CrossEntropyLoss()(F(r.lg3), F(r.tg3) + 1), r.ce3, 1e-5, 1e-6, "ce (N, C, d)")
  T.match_torch(nn.NLLLoss({weight = w})(nn.LogSoftmax(2)(logits), target), r.nll, 1e-5, 1e-6, "nll")
  T.match_torch(nn.Softmax(2)(logits), r.softmax, 1e-5, 1e-7, "softmax")
  T.match_torch(nn.LogSoftmax(1)(logits), r.log_softmax, 1e-5, 1e-6, "log_softmax")
  local q = R.loss2
  local a, b, bt = F(q.a), F(q.b), F(q.bt)
  T.match_torch(nn.MSELoss()(a, b), q.mse, 1e-5, 1e-6, "mse")
  T.match_torch(nn.MSELoss({reduction = "sum"})(a, b), q.mse_sum, 1e-5, 1e-6, "mse sum")
  T.match_torch(nn.L1Loss()(a, b), q.l1, 1e-5, 1e-6, "l1")
  T.match_torch(nn.L1Loss({reduction = "none"})(a, b), q.l1_none, 1e-5, 1e-6, "l1 none")
  T.match_torch(nn.BCEWithLogitsLoss()(a * 5, bt), q.bce, 1e-5, 1e-6, "bce")
  local bce = nn.BCEWithLogitsLoss({weight = F(q.bw), pos_weight = F(q.pw), reduction = "sum"})
  T.match_torch(bce(a * 5, bt), q.bce_pw, 1e-5, 1e-5, "bce weights")
  -- weights are buffers, as in PyTorch
  T.truthy(bce:state_dict().pos_weight ~= nil)
end)

T.case("Sequential runs its children in order; Flatten, Identity, Dropout", function()
  local m = nn.Sequential(nn.Flatten(), nn.Linear(6, 2), nn.Identity())
  T.shape_eq(m(dl.randn(5, 2, 3)), {5, 2})
  local d = nn.Dropout(0.5)
  local x = dl.ones(1000)
  local y = d(x)
  local kept = y:ne(0):sum():item()
  T.truthy(kept > 400 and kept < 600, "about half kept: " .. kept)
  T.tensor_eq(y:amax(), 2)
  d:eval()
  T.tensor_eq(d(x), x)
  T.tensor_eq(nn.Dropout(1.0)(x):sum(), 0)
  local xi = dl.ones(100)
  local yi = nn.Dropout(0.5, {inplace = true})(xi)
  T.tensor_eq(xi, yi)
  T.truthy(xi:eq(0):sum():item() > 0, "in place: the input itself is zeroed")
end)

-- --- dl.nn.init ---------------------------------------------------------------------

local function stats(t)
  local m = t:mean():item()
  local s = t:std():item()
  return m, s, t:amin():item(), t:amax():item()
end

T.case("init: calculate_gain", function()
  local want = R.gains
  local got = {}
  for i, n in ipairs {"linear", "conv2d", "sigmoid", "tanh", "relu", "leaky_relu", "selu"} do
    got[i] = nn.init.calculate_gain(n)
  end
  got[#got + 1] = nn.init.calculate_gain("leaky_relu", 0.2)
  for i = 1, #want do T.near(got[i], want[i], 1e-15, "gain " .. i) end
end)

T.case("init: statistics on large tensors follow the formulas", function()
  local init = nn.init
  dl.manual_seed(1)
  -- weight (out=256, in=128, 3, 3): fan_in = 1152, fan_out = 2304
  local w = dl.empty(256, 128, 3, 3)
  local fan_in, fan_out = 128 * 9, 256 * 9
  init.kaiming_uniform_(w, {a = math.sqrt(5)})
  local bound = 1 / math.sqrt(fan_in) -- gain sqrt(2/6) * sqrt(3) / sqrt(fan_in)
  local m, s, lo, hi = stats(w)
  T.truthy(hi <= bound and lo >= -bound, "within the bound")
  T.near(hi, bound, 1e-3)
  T.near(lo, -bound, 1e-3)
  T.near(s, bound / math.sqrt(3), 0.01)
  T.truthy(math.abs(m) < 1e-3 * bound * 10)
  init.kaiming_normal_(w, {mode = "fan_out", nonlinearity = "relu"})
  m, s = stats(w)
  T.near(s, math.sqrt(2 / fan_out), 0.01)
  T.truthy(math.abs(m) < 3 * math.sqrt(2 / fan_out) / math.sqrt(w:numel()))
  init.kaiming_normal_(w)
  m, s = stats(w)
  T.near(s, math.sqrt(2 / (1 + 0.0)) / math.sqrt(fan_in), 0.01)
  init.kaiming_uniform_(w, {mode = "fan_out", nonlinearity = "leaky_relu", a = 0.2})
  _, s, lo, hi = stats(w)
  local b2 = math.sqrt(3) * math.sqrt(2 / 1.04) / math.sqrt(fan_out)
  T.truthy(hi <= b2 and lo >= -b2)
  T.near(s, b2 / math.sqrt(3), 0.01)
  init.xavier_uniform_(w, {gain = 2})
  local a = 2 * math.sqrt(6 / (fan_in + fan_out))
  _, s, lo, hi = stats(w)
  T.truthy(hi <= a and lo >= -a)
  T.near(hi, a, 2e-3)
  T.near(s, a / math.sqrt(3), 0.01)
  init.xavier_normal_(w, init.calculate_gain("tanh"))
  _, s = stats(w)
  T.near(s, 5 / 3 * math.sqrt(2 / (fan_in + fan_out)), 0.01)
  init.normal_(w, 3, 0.5)
  m, s = stats(w)
  T.near(m, 3, 2e-3)
  T.near(s, 0.5, 0.01)
  init.uniform_(w, -2, 4)
  m, s, lo, hi = stats(w)
  T.near(m, 1, 1e-2)
  T.truthy(lo >= -2 and hi <= 4)
  T.near(s, 6 / math.sqrt(12), 0.01)
  init.constant_(w, 0.25)
  T.eq(w:amin():item(), 0.25)
  T.eq(w:amax():item(), 0.25)
  init.zeros_(w)
  T.eq(w:abs():amax():item(), 0)
  init.ones_(w)
  T.eq(w:sum():item(), w:numel())
  -- empty tensors are left alone
  T.shape_eq(init.kaiming_uniform_(dl.empty(0, 3)), {0, 3})
end)

T.case("init: layer defaults (Linear/Conv2d bound 1/sqrt(fan_in))", function()
  dl.manual_seed(2)
  local conv = nn.Conv2d(64, 128, 3)
  local bound = 1 / math.sqrt(64 * 9)
  local _, s, lo, hi = stats(conv.weight)
  T.truthy(hi <= bound and lo >= -bound)
  T.near(s, bound / math.sqrt(3), 0.02)
  _, _, lo, hi = stats(conv.bias)
  T.truthy(hi <= bound and lo >= -bound)
  local lin = nn.Linear(1000, 300)
  bound = 1 / math.sqrt(1000)
  _, s, lo, hi = stats(lin.weight)
  T.truthy(hi <= bound and lo >= -bound)
  T.near(s, bound / math.sqrt(3), 0.02)
  T.near(hi, bound, 1e-2)
  _, _, lo, hi = stats(lin.bias)
  T.truthy(hi <= bound and lo >= -bound)
end)

-- --- bad input ----------------------------------------------------------------------

T.case("bad input", function()
  T.raises(function() nn.Conv2d(3, 64, 7, {stride = 2, paddin = 3}) end, "Conv2d: unknown option 'paddin'")
  T.raises(function() nn.Conv2d(3, 64, 7, 2) end, "Conv2d: options table expected, got number")
  T.raises(function() nn.Conv2d(3, 64, 7, {groups = 2}) end, "in_channels (3) must be divisible by groups (2)")
  T.raises(function() nn.Conv2d(3, 64, 7, {padding = "same", stride = 2}) end, "not supported for strided")
  T.raises(function() nn.Conv2d(3, 64, {3, 3, 3}) end, "kernel_size must be an integer or a table of 2 integers")
  T.raises(function() nn.Conv2d(3, 64, 3, {padding_mode = "mirror"}) end, "padding_mode must be one of")
  T.raises(function() nn.Linear("4", 2) end, "Linear: in_features must be an integer, got string")
  T.raises(function() nn.Linear(4.5, 2) end, "Linear: in_features must be an integer, got 4.5")
  T.raises(function() nn.Linear(4, 2, {bias = 1}) end, "Linear: bias must be a boolean")
  T.raises(function() nn.Linear(4, 2)(dl.ones(3, 5)) end, "Linear: input has 5 features")
  T.raises(function() nn.Linear(4, 2)("x") end, "Linear: input must be a tensor, got string")
  T.raises(function() nn.BatchNorm2d(3)(dl.ones(2, 3, 4)) end, "BatchNorm2d: expected 4D input (got 3D input)")
  T.raises(function() nn.BatchNorm2d(3)(dl.ones(2, 4, 2, 2)) end, "input has 4 channels, the layer expects 3")
  T.raises(function() nn.BatchNorm2d(3)(dl.ones(1, 3, 1, 1)) end, "expected more than 1 value per channel")
  T.raises(function() nn.Dropout(1.5) end, "dropout probability has to be between 0 and 1, but got 1.5")
  T.raises(function() nn.ReLU({inplace = "yes"}) end, "ReLU: inplace must be a boolean")
  T.raises(function() nn.MaxPool2d(3, {return_indices = true}) end, "MaxPool2d: unknown option 'return_indices'")
  T.raises(function() nn.Softmax() end, "Softmax: dim is required")
  T.raises(function() nn.CrossEntropyLoss({reduction = "avg"}) end, "reduction must be one of none, mean, sum")
  T.raises(function() nn.Sequential(nn.ReLU(), 5) end, "Sequential: argument 2 must be a Module, got number")
  T.raises(function() nn.ModuleList{nn.ReLU(), "x"} end, "ModuleList: expected a Module, got string")
  T.raises(function() nn.ModuleList():forward() end, "has no forward")
  T.raises(function() nn.Module()(1) end, 'Module [Module] is missing the required "forward" function')
  T.raises(function() nn.Module:extend() end, "a class name (string) is required")
  local lin = nn.Linear(2, 2)
  T.raises(function() lin.weight = 3 end, "cannot assign 'number' as parameter 'weight'")
  T.raises(function() lin.weight = dl.ones(2, 2) end, "tensor without requires_grad")
  T.raises(function() lin:register_buffer("weight", dl.ones(1)) end, "attribute 'weight' already exists")
  T.raises(function() lin:register_parameter("a.b", nil) end, "can't contain \".\"")
  T.raises(function() lin:register_parameter("forward", nil) end, "it is a method name")
  T.raises(function() lin:add_module("sub", dl.ones(1)) end, "tensor is not a Module subclass")
  T.raises(function() lin:train("yes") end, "training mode is expected to be boolean")
  T.raises(function() lin:to(dl.int64) end, "only accepts floating point dtypes")
  T.raises(function() lin:to(5) end, "dtype, device or options table expected")
  T.raises(function() lin:named_parameters({recursive = false}) end, "named_parameters: unknown option 'recursive'")
  T.raises(function() nn.init.kaiming_uniform_(dl.ones(3, 3), {nonlinearity = "swish"}) end,
    "unsupported nonlinearity 'swish'")
  T.raises(function() nn.init.kaiming_normal_(dl.ones(3, 3), {mode = "fan_avg"}) end,
    "mode fan_avg not supported, please use one of fan_in, fan_out")
  T.raises(function() nn.init.xavier_uniform_(dl.ones(3)) end, "fewer than 2 dimensions")
  T.raises(function() nn.init.calculate_gain("leaky_relu", "x") end, "negative_slope x not a valid number")
  T.raises(function() nn.init.constant_("w", 1) end, "constant_: a tensor is required, got string")
  T.raises(function() nn.CrossEntropyLoss()(dl.randn(2, 3), dl.tensor({1, 4})) end,
    "target label 4 is out of range for 3 classes")
  T.raises(function() nn.functional.conv2d(dl.randn(1, 2, 3, 3), dl.randn(1, 1, 1, 1)) end,
    "conv2d: input has 2 channels")
  T.raises(function() nn.functional.linear(dl.randn(2, 3), dl.randn(3)) end, "linear: weight must be 2-D, got 1-D")
end)

T.done()

-- model.lua - the Lua half of the embedding example (tests/embed/host.c):
-- the host runs this file in its state, then calls these globals with its
-- own tensors.
--   build(seed, arch)  a small classifier with seeded initialisation, in eval
--                      mode: arch "resnet18" (10 classes, for 3x32x32 images)
--                      or "mlp" (the same interface without convolutions)
--   classify(x)        logits (N, 10) of a float32 image batch (N, 3, 32, 32)
--   reference(n, off)  the same computation done from Lua alone: builds the
--                      batch the host builds (test_image below) and classifies
--                      it, so the host can compare the two
-- test_image is the host's formula: element i (0-based, row-major) of the
-- batch is ((i + off) * 37 % 101) / 100 - 0.5, exact in float32 on both sides.

function build(seed, arch)
  dl.manual_seed(seed)
  if arch == "resnet18" then
    net = dl.models.resnet18 {num_classes = 10}
  elseif arch == "mlp" then
    local nn = dl.nn
    net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 64), nn.ReLU(), nn.Linear(64, 10))
  else
    error("build: unknown arch " .. tostring(arch))
  end
  net:eval()
  return net
end

function classify(x)
  return dl.no_grad(function() return net(x) end)
end

function test_image(n, off)
  local k = (dl.arange(n * 3 * 32 * 32) + (off or 0)) * 37 % 101
  return (k / 100 - 0.5):view(n, 3, 32, 32)
end

function reference(n, off)
  return classify(test_image(n, off))
end

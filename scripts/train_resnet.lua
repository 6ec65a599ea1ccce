-- train_resnet.lua - trains an image classifier on an ImageFolder: the seed's
-- PyTorch program (ResNet-50, Resize(256) + CenterCrop(224), batches of 32,
-- SGD lr 0.001 momentum 0.9, 10 epochs, "[epoch, batch] loss: x.xxx" every
-- 100 batches, "Finished Training") plus what comes after it: validation,
-- checkpoints with exact resume, Ctrl-C handling, a progress bar and a plot.
--
--   dlua scripts/train_resnet.lua --data ./data/train --val ./data/val --arch resnet18
--   dlua scripts/train_resnet.lua --preset fashion-mnist     # the README's default run
--   dlua scripts/train_resnet.lua --resume checkpoints/last.safetensors
--   dlua scripts/train_resnet.lua --device cuda --amp bf16 --channels-last
--   dlua scripts/train_resnet.lua --help
--   mpirun -np 4 dlua scripts/train_resnet.lua --data ./data/train   # data-parallel
--
-- Under a launcher (mpirun, srun: several processes) or with --distributed,
-- each process is one rank of dl.distributed (0-based): the model is wrapped
-- in DistributedDataParallel, each rank reads its DistributedSampler share,
-- --batch-size and --workers are split among the ranks (the global batch and
-- the learning rate stay those of one process, as in PyTorch's ImageNet
-- example), on CUDA LOCAL_RANK picks the GPU, the logged loss is the mean
-- over ranks, only rank 0 prints, plots and writes checkpoints (after a
-- barrier), --resume is read by every rank, and errors are prefixed
-- "[rank r/N]".
--
-- --device auto (the default) trains on the GPU when there is one, else on
-- the CPU, and prints which; --device cuda on a machine without one stops at
-- once (status 2).  The model, the batches (pinned, copied without blocking)
-- and the loss live on that device; checkpoints hold CPU copies, so one
-- written on a GPU resumes on the CPU and the other way round.
--
-- On a GPU (one process) a training step never waits for the GPU: the loss
-- is summed on the device and read every --log-every batches (and at the end
-- of an epoch), so the per-step loss history holds each window's mean; a
-- step whose loss is not finite is skipped on the device and
-- --stop-on-nonfinite stops at the next read.  --cuda-graph captures the
-- whole step (forward, backward, optimizer, the loss sum) in a CUDA graph
-- after 3 eager steps and replays it for every full batch (a last, smaller
-- batch runs eagerly); the learning rate still follows the schedule.
--
-- Exit status: 0 when training finished (or stopped at --max-steps), 130
-- after Ctrl-C (a checkpoint is written first), 2 for bad options or input
-- (one line on stderr), 1 for anything unexpected (message and traceback).
local dl = require "dl"
local train = require "dl.train"
local progress = train.progress
local checkpoint = train.checkpoint
local tdata = train.data
local tmodels = train.models
local tdevice = train.device
local tdist = require "dl.train.distributed"
local cli = require "dl.train.cli"
local file_exists = require("dl.util").file_exists

local PROG = "train_resnet"

-- --- options ------------------------------------------------------------------

local SPEC = {
  {name = "preset", type = "choice", choices = {"none", "fashion-mnist"}, default = "none",
   help = "a named set of defaults (explicit options still win); fashion-mnist is the README's 5-minute run"},
  {name = "data", default = "./data/train", metavar = "DIR", help = "training ImageFolder (one sub-folder per class)"},
  {name = "val", metavar = "DIR", help = "validation ImageFolder, evaluated after every epoch"},
  {name = "arch", default = "resnet50", metavar = "NAME", help = "model: resnet18/34/50/101/152, resnext*, wide_resnet*, tinycnn"},
  {name = "weights", metavar = "FILE", help = "safetensors state dict (or checkpoint) to start from; the classifier is replaced when the class count differs"},
  {name = "num-classes", type = "int", min = 1, metavar = "N", default_text = "the training folder's", help = "classifier outputs"},
  {name = "epochs", type = "int", min = 1, default = 10, help = "passes over the training data"},
  {name = "batch-size", type = "int", min = 1, default = 32, help = "images per step"},
  {name = "lr", type = "number", min = 0, default = 0.001, help = "peak learning rate"},
  {name = "momentum", type = "number", min = 0, default = 0.9, help = "SGD momentum"},
  {name = "weight-decay", type = "number", min = 0, default = 0, help = "SGD weight decay (L2)"},
  {name = "lr-schedule", type = "choice", choices = {"none", "step", "cosine"}, default = "none",
   help = "per-step learning-rate schedule after the warmup"},
  {name = "lr-step-size", type = "int", min = 1, metavar = "EPOCHS", default_text = "epochs/3",
   help = "with --lr-schedule step: epochs between x0.1 decays"},
  {name = "warmup-epochs", type = "number", min = 0, default = 0, help = "linear warmup from 0 (fractions allowed)"},
  {name = "workers", type = "int", min = 0, default = 4, help = "data-loader threads (0: load on the main thread)"},
  {name = "threads", type = "int", min = 1, metavar = "N", default_text = "dl's default", help = "compute threads (dl.set_num_threads)"},
  {name = "device", default = "auto", metavar = "DEV", help = "where to train: auto, cpu, cuda or cuda:N (auto: a GPU when there is one)"},
  {name = "amp", type = "choice", choices = {"off", "bf16", "fp16"}, default = "off", help = "mixed precision on CUDA (fp16 adds loss scaling)"},
  {name = "channels-last", type = "flag", default = false, help = "keep images and conv weights in NHWC memory order"},
  {name = "cuda-graph", type = "flag", default = false,
   help = "capture the training step in a CUDA graph and replay it (CUDA, one process)"},
  {name = "stop-on-nonfinite", type = "flag", default = true,
   help = "stop with one line at the first NaN or infinite loss, before the step"},
  {name = "augment", type = "flag", default = false, help = "RandomResizedCrop + RandomHorizontalFlip instead of Resize + CenterCrop"},
  {name = "image-size", type = "int", min = 1, default = 224, help = "side of the square input"},
  {name = "resize", type = "int", min = 1, metavar = "N", default_text = "image-size*256/224", help = "shorter side before the centre crop"},
  {name = "train-subset", type = "int", min = 0, default = 0, help = "train on N images spread evenly over the folder (0: all)"},
  {name = "val-subset", type = "int", min = 0, default = 0, help = "validate on N images spread evenly over --val (0: all)"},
  {name = "seed", type = "int", default = 0, help = "seed for initialisation and shuffling"},
  {name = "log-every", type = "int", min = 1, default = 100, help = "batches between loss lines"},
  {name = "save-dir", default = "./checkpoints", metavar = "DIR", help = "where last.safetensors and best.safetensors go"},
  {name = "resume", optional_value = "", metavar = "FILE", help = "continue from a checkpoint (no FILE: <save-dir>/last.safetensors)"},
  {name = "plot", metavar = "PNG", help = "draw loss and accuracy curves into this PNG after every epoch"},
  {name = "tensorboard", metavar = "DIR", help = "write TensorBoard event files into DIR (tensorboard --logdir DIR)"},
  {name = "max-steps", type = "int", min = 0, default = 0, help = "stop after this many optimizer steps in all (0: no limit); writes a checkpoint"},
  {name = "distributed", type = "flag", default = false,
   help = "data-parallel over dl.distributed (implied when mpirun/srun started several processes)"},
  {name = "sync-bn", type = "flag", default = false,
   help = "with several ranks: batch norms use the global batch's statistics (dl.nn.SyncBatchNorm)"},
  {name = "dist-backend", type = "choice", choices = {"auto", "mpi", "nccl", "local"}, default = "auto",
   help = "dl.distributed backend (auto: mpi)"},
  {name = "dist-timeout", type = "number", min = 1, default = 1800, help = "seconds before a collective that a rank never joins fails"},
}

local PRESETS = {
  ["fashion-mnist"] = {
    data = "./data/fashion-mnist/train", val = "./data/fashion-mnist/val", arch = "resnet18",
    image_size = 32, resize = 32, epochs = 3, batch_size = 128, lr = 0.05, momentum = 0.9,
    weight_decay = 5e-4, lr_schedule = "cosine", warmup_epochs = 0.5, workers = 2, threads = 2,
    train_subset = 24000, val_subset = 0, log_every = 20, save_dir = "./checkpoints/fashion-mnist",
    plot = "./checkpoints/fashion-mnist/curves.png",
  },
}

-- "--preset NAME" spelled out as the options it sets, wrapped for --help
local function preset_text(name)
  local keys = {}
  for k in pairs(PRESETS[name]) do keys[#keys + 1] = k end
  table.sort(keys)
  local lines, line = {}, "--preset " .. name .. " means:"
  for _, k in ipairs(keys) do
    local word = "--" .. k:gsub("_", "-") .. " " .. tostring(PRESETS[name][k])
    if #line + #word + 1 > 96 then
      lines[#lines + 1] = line
      line = "   "
    end
    line = line .. " " .. word
  end
  lines[#lines + 1] = line
  return table.concat(lines, "\n")
end

local HELP_INFO = {
  usage = "dlua scripts/train_resnet.lua [options]",
  description = "Trains an image classifier on an ImageFolder (sub-folder per class) with SGD.\n" ..
    "Defaults are the seed program's; --preset fashion-mnist is the built-in 5-minute run.",
  epilog = preset_text("fashion-mnist") .. "\n\n" ..
    "Ctrl-C finishes the current step, writes <save-dir>/last.safetensors and prints how to resume.",
}

local ctx -- the distributed context (dl.train.distributed), nil when one process

-- User errors (one line on stderr, exit status 2): dl.train.cli's.
local die, checked = cli.die, cli.checked

local function sh_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- Creates dir (and parents) and proves it writable, or dies.
local function ensure_writable_dir(dir)
  os.execute("mkdir -p -- " .. sh_quote(dir) .. " 2>/dev/null")
  local probe = dir .. "/.write_test_" .. tostring(os.time())
  local f, err = io.open(probe, "wb")
  if not f then die("--save-dir %s is not writable (%s)", dir, tostring(err):gsub("^[^:]*: ", "")) end
  f:close()
  os.remove(probe)
end

-- --- the learning rate ---------------------------------------------------------

-- lr for global step s (1-based) of `total`, with `per_epoch` steps an epoch:
-- linear warmup to o.lr over warmup_epochs, then the schedule.
local function lr_at(o, s, total, per_epoch)
  local warm = math.floor(o.warmup_epochs * per_epoch + 0.5)
  if s <= warm then return o.lr * s / warm end
  if o.lr_schedule == "cosine" then
    local t, T = s - warm - 1, math.max(1, total - warm)
    return o.lr * 0.5 * (1 + math.cos(math.pi * t / T))
  elseif o.lr_schedule == "step" then
    local epoch = (s - 1) // per_epoch -- 0-based epoch of this step
    local size = o.lr_step_size or math.max(1, o.epochs // 3)
    return o.lr * 0.1 ^ (epoch // size)
  end
  return o.lr
end

-- --- main -------------------------------------------------------------------------

local function main(argv)
  local o, given = cli.options(argv, SPEC, HELP_INFO)
  if not o then return 0 end
  ctx = checked("--distributed", tdist.setup, o)
  local print = function(...) tdist.print(ctx, ...) end

  -- the device first: a run that cannot have it stops before any work
  local device, device_note = tdevice.resolve(o.device)
  if not device then die("%s", device_note) end
  device = tdist.device(ctx, device)

  -- resume: the checkpoint's options fill in what the command line leaves out
  local resume_path, ck
  if o.resume ~= nil then
    resume_path = o.resume ~= "" and o.resume or (o.save_dir .. "/last.safetensors")
    if not file_exists(resume_path) then die("--resume %s: no such file", resume_path) end
    ck = checked("--resume " .. resume_path, checkpoint.load, resume_path)
    local saved = ck.meta.options or {}
    -- the device belongs to this machine, not to the checkpoint; so does
    -- mixed precision when this run is on the CPU
    local cpu = device == "cpu"
    for k, v in pairs(saved) do
      if not given[k] and k ~= "resume" and k ~= "max_steps" and k ~= "device" and not (cpu and k == "amp") then
        o[k] = v
      end
    end
  elseif o.preset ~= "none" then
    for k, v in pairs(PRESETS[o.preset]) do
      if not given[k] then o[k] = v end
    end
  end
  o.resume = nil

  if o.threads then dl.set_num_threads(o.threads) end
  if not tmodels.exists(o.arch) then checked(nil, tmodels.build, o.arch, 1) end

  -- precision
  local amp_dtype, amp_err = tdevice.amp_dtype(o.amp, device)
  if amp_err then die("%s", amp_err) end
  local on_gpu = device ~= "cpu"

  if tdist.is_main(ctx) then ensure_writable_dir(o.save_dir) end
  local last_path = o.save_dir .. "/last.safetensors"
  local best_path = o.save_dir .. "/best.safetensors"

  dl.manual_seed(o.seed)

  -- data
  local tf = checked("--image-size", tdata.transform, {image_size = o.image_size, resize = o.resize, augment = o.augment})
  local eval_tf = checked("--image-size", tdata.transform, {image_size = o.image_size, resize = o.resize})
  local train_folder = checked(nil, tdata.folder, "--data", o.data, tf)
  local classes = train_folder.classes
  local train_set = train_folder
  if o.train_subset > 0 and o.train_subset < #train_folder then
    train_set = dl.data.Subset(train_folder, tdata.spread(#train_folder, o.train_subset))
  end
  local val_set
  if o.val then
    local vf = checked(nil, tdata.folder, "--val", o.val, eval_tf)
    local same = #vf.classes == #classes
    for i = 1, #classes do same = same and vf.classes[i] == classes[i] end
    if not same then
      die("--val %s: its classes (%d) differ from --data's (%d)", o.val, #vf.classes, #classes)
    end
    val_set = vf
    if o.val_subset > 0 and o.val_subset < #vf then val_set = dl.data.Subset(vf, tdata.spread(#vf, o.val_subset)) end
  end
  local sampler = ctx and dl.data.DistributedSampler(train_set, {seed = o.seed})
  local loader = dl.data.DataLoader(train_set, {batch_size = tdist.per_rank(ctx, o.batch_size),
    shuffle = not sampler, sampler = sampler, num_workers = ctx and o.workers // ctx.world or o.workers,
    seed = o.seed, pin_memory = on_gpu})
  local val_loader = val_set and dl.data.DataLoader(val_set, {batch_size = 2 * o.batch_size,
    num_workers = o.workers, seed = o.seed, pin_memory = on_gpu})
  local nb = #loader
  local total_steps = nb * o.epochs

  -- model
  local num_classes = o.num_classes or #classes
  if num_classes < #classes then
    die("--num-classes %d is less than the %d classes in %s", num_classes, #classes, o.data)
  end
  local model = checked(nil, tmodels.build, o.arch, num_classes)
  if o.weights and not ck then
    local sd = checked("--weights " .. o.weights, checkpoint.read_weights, o.weights)
    local replaced = checked(nil, checkpoint.load_weights, model, sd,
      {path = "--weights " .. o.weights, arch = o.arch, classifier = tmodels.classifier})
    if replaced then
      print(string.format("weights: %s loaded; new %d-class classifier (the file's has %d)", o.weights,
        num_classes, tmodels.num_classes_of(sd) or -1))
    else
      print(string.format("weights: %s loaded", o.weights))
    end
  end
  checked("--device " .. device, model.to, model, {device = device,
    memory_format = o.channels_last and "channels_last" or nil})
  local criterion = dl.nn.CrossEntropyLoss()
  local scaler = amp_dtype == dl.float16 and dl.amp.GradScaler() or nil
  local optimizer = dl.optim.SGD(model:parameters(), {lr = o.lr, momentum = o.momentum,
    weight_decay = o.weight_decay})

  -- state: where we are, what happened so far
  local epoch0, skip, step = 1, 0, 0
  local losses, val_hist = {}, {}
  local best_top1, best_epoch = -1, nil
  if ck then
    checked("--resume " .. resume_path, checkpoint.load_weights, model, ck.model,
      {path = resume_path, arch = o.arch, allow_new_classifier = false})
    if ck.optimizer_name and ck.optimizer_name ~= "SGD" then
      die("--resume %s: the checkpoint holds %s state, this program uses SGD", resume_path, ck.optimizer_name)
    end
    checked("--resume " .. resume_path, optimizer.load_state_dict, optimizer, ck.optimizer)
    if scaler and ck.meta.grad_scaler then scaler:load_state_dict(ck.meta.grad_scaler) end
    if ck.rng_state then dl.set_rng_state(ck.rng_state) end
    local pos = ck.meta.position or {}
    epoch0, skip, step = pos.epoch or 1, pos.batch or 0, ck.meta.step or 0
    if ck.tensors["history.loss"] then losses = ck.tensors["history.loss"]:tolist() end
    local vh = ck.tensors["history.val"]
    if vh and vh:dim() == 2 then
      for i, r in ipairs(vh:tolist()) do
        val_hist[i] = {epoch = math.tointeger(r[1]) or r[1], top1 = r[2], top5 = r[3], loss = r[4]}
      end
    end
    best_top1, best_epoch = ck.meta.best_top1 or -1, ck.meta.best_epoch
    if skip >= nb then epoch0, skip = epoch0 + 1, 0 end
    print(string.format("resuming from %s: epoch %d, batch %d, step %d", resume_path, epoch0, skip, step))
  end

  local function meta_for(pos)
    local opts = {}
    for k, v in pairs(o) do opts[k] = v end
    return {epoch = pos.epoch - (pos.batch == 0 and 1 or 0), step = step, position = pos, options = opts,
      classes = classes, arch = o.arch, num_classes = num_classes, image_size = o.image_size,
      resize = o.resize or tdata.default_resize(o.image_size), mean = tdata.MEAN, std = tdata.STD,
      best_top1 = best_top1 >= 0 and best_top1 or nil, best_epoch = best_epoch, dlua = dl.__version__,
      grad_scaler = scaler and scaler:state_dict() or nil}
  end
  local function history_tensors()
    local t = {["history.loss"] = #losses > 0 and dl.tensor(losses, {dtype = dl.float64})
      or dl.zeros(0, {dtype = dl.float64})}
    if #val_hist > 0 then
      local rows = {}
      for i, v in ipairs(val_hist) do rows[i] = {v.epoch, v.top1, v.top5, v.loss} end
      t["history.val"] = dl.tensor(rows, {dtype = dl.float64})
    end
    return t
  end
  local function save(path, pos)
    tdist.barrier(ctx)
    if not tdist.is_main(ctx) then return end
    checked("--save-dir " .. o.save_dir, checkpoint.save, path, {model = model, optimizer = optimizer,
      meta = meta_for(pos), tensors = history_tensors()})
  end
  local function draw_plot()
    if not o.plot or not tdist.is_main(ctx) then return end
    local title = string.format("%s on %s, %dx%d, batch %d, lr %g", o.arch, o.data:gsub("/+$", ""):match("[^/]*/?[^/]*$"),
      o.image_size, o.image_size, o.batch_size, o.lr)
    local ok, err = pcall(train.plot.training_curves, o.plot, {losses = losses, val = val_hist, title = title})
    if not ok then io.stderr:write(PROG, ": warning: --plot ", o.plot, ": ", tostring(err):gsub("\n.*", ""), "\n") end
  end

  -- data-parallel: gradients averaged over the ranks during backward
  local n_sync = 0
  if ctx and o.sync_bn then
    dl.nn.SyncBatchNorm.convert(model) -- in place: the root is no batch norm
    for _, m in model:named_modules() do
      if m:isinstance(dl.nn.SyncBatchNorm) then n_sync = n_sync + 1 end
    end
  end
  local net = ctx and dl.nn.parallel.DistributedDataParallel(model) or model
  print(device_note)
  print(string.format("%s: %d classes, %d training images (%d batches of %d)%s; %s on %s%s, %d threads",
    PROG, #classes, #train_set, nb, o.batch_size,
    val_set and string.format(", %d validation images", #val_set) or "",
    o.arch, device, amp_dtype and (", " .. o.amp) or "", dl.get_num_threads()))
  if ctx then
    print(string.format("distributed: %d ranks (%s), %d images per rank per step%s", ctx.world,
      dl.distributed.get_backend(), loader.batch_size,
      o.sync_bn and string.format(", %d SyncBatchNorm layers", n_sync) or ""))
  end

  -- TensorBoard (--tensorboard): loss, lr, images/s, inputs, validation, weight histograms
  local tblog = o.tensorboard and checked("--tensorboard " .. o.tensorboard, train.tensorboard.open,
    o.tensorboard, {log_every = o.log_every})

  -- the step itself: forward, backward, optimizer; on a GPU (one process)
  -- without a host read: the loss is summed into loss_sum on the device and a
  -- step whose loss is not finite is skipped there (the scaler does that for
  -- fp16), so it can also be captured in a CUDA graph
  local lazy = on_gpu and not ctx
  if o.cuda_graph and not lazy then
    die("--cuda-graph: needs --device cuda in one process")
  end
  local loss_sum = lazy and dl.zeros({}, {dtype = dl.float64, device = device}) or nil
  local window_n, window_first = 0, nil -- steps summed into loss_sum, the first one's batch
  local function train_step(x, y)
    local loss
    if amp_dtype then
      -- x, y go in as arguments: a closure over the loop's variables
      -- upsets the loader's to-be-closed iterator (goto continue above)
      loss = dl.autocast({dtype = amp_dtype}, function(a, b) return criterion(net(a), b) end, x, y)
    else
      loss = criterion(net(x), y)
    end
    optimizer:zero_grad()
    if scaler then scaler:scale(loss):backward() else loss:backward() end
    return loss
  end
  local function update_step(loss)
    if scaler then
      scaler:step(optimizer)
      scaler:update()
    else
      if lazy and o.stop_on_nonfinite then optimizer._skip_if = loss:detach():isfinite():logical_not() end
      optimizer:step()
      optimizer._skip_if = nil
    end
  end
  local function lazy_step(x, y)
    local loss = train_step(x, y)
    update_step(loss)
    dl.no_grad(function() loss_sum:add_(loss:detach()) end)
    return loss
  end
  local graphed, graph_batch -- the captured step and its batch size
  local GRAPH_WARMUP = 3
  local steps_this_run = 0

  local tty = progress.stdout_is_tty()
  dl._train.sigint_watch(true)
  local t_start = dl.clock()
  local stopped -- nil, "interrupt" or "max-steps"

  for epoch = epoch0, o.epochs do
    local p = progress.new{epoch = epoch, epochs = o.epochs, total = nb, log_every = o.log_every, tty = tty,
      start = epoch == epoch0 and skip or 0, out = tdist.out(ctx)}
    if sampler then sampler:set_epoch(epoch) end
    model:train()
    local t_wait = dl.clock()
    for b, x, y in loader:iter(epoch) do
      if epoch == epoch0 and b <= skip then goto continue end
      do
        local wait = dl.clock() - t_wait
        step = step + 1
        local lr = lr_at(o, step, total_steps, nb)
        for _, g in ipairs(optimizer.param_groups) do g.lr = lr end
        if on_gpu then
          x = x:to({device = device, non_blocking = true})
          y = y:to({device = device, non_blocking = true})
        end
        if o.channels_last and x:dim() == 4 then x = x:contiguous({memory_format = "channels_last"}) end
        local l, stop_all
        if lazy then
          if o.cuda_graph and not graphed and steps_this_run >= GRAPH_WARMUP then
            graph_batch = x.shape[1]
            graphed = dl.cuda.graphed(lazy_step, {x, y}, {warmup = 0})
          end
          if graphed and x.shape[1] == graph_batch then graphed(x, y) else lazy_step(x, y) end
          steps_this_run = steps_this_run + 1
          window_n, window_first = window_n + 1, window_first or b
          stop_all = dl._train.sigint_pending() > 0
          if o.max_steps > 0 and step >= o.max_steps then stopped = "max-steps" end
          if b % o.log_every == 0 or b == nb or stop_all or stopped then
            -- the one read of the window: its mean loss
            local mean = loss_sum:item() / window_n
            for s2 = step - window_n + 1, step do losses[s2] = mean end
            p:add_losses(mean * window_n, window_n)
            if o.stop_on_nonfinite and train.guard.nonfinite(mean) then
              -- the non-finite steps were skipped on the device: the weights stay finite
              p:finish()
              local where = string.format("epoch %d, batches %d-%d", epoch, window_first, b)
              local ok, msg = pcall(train.guard.check_loss, mean, where)
              die("%s", ok and "the loss is not finite" or msg)
            end
            loss_sum:zero_()
            window_n, window_first = 0, nil
            l = mean
          end
        else
          local loss = train_step(x, y)
          l, stop_all = tdist.step_sync(ctx, loss:item(), dl._train.sigint_pending() > 0)
          if o.stop_on_nonfinite and train.guard.nonfinite(l) then
            -- before the step: the weights and the next checkpoint stay finite
            p:finish()
            local ok, msg = pcall(train.guard.check_loss, l, string.format("epoch %d, batch %d", epoch, b))
            die("%s", ok and "the loss is not finite" or msg)
          end
          update_step(loss)
          losses[step] = l
        end
        if tblog then
          tblog:inputs(x, step)
          tblog:step(step, l, lr, y.shape[1])
        end
        p:step(b, y.shape[1], not lazy and l or nil, wait)
        if stop_all then stopped = "interrupt" end
        if o.max_steps > 0 and step >= o.max_steps then stopped = stopped or "max-steps" end
        if stopped then
          p:finish()
          local pos = b < nb and {epoch = epoch, batch = b} or {epoch = epoch + 1, batch = 0}
          save(last_path, pos)
          draw_plot()
          break
        end
      end
      ::continue::
      t_wait = dl.clock()
    end
    if stopped then break end
    local st = p:finish()

    -- validation
    local summary = string.format("epoch %d/%d: train loss %.4f, %.0f img/s, %s", epoch, o.epochs,
      st.mean_loss or 0 / 0, st.images_per_s, progress.format_time(st.seconds))
    if val_loader then
      local t0 = dl.clock()
      local r = checked("--val " .. o.val, train.evaluate.run, model, val_loader, {device = on_gpu and device or nil,
        amp_dtype = amp_dtype, channels_last = o.channels_last})
      val_hist[#val_hist + 1] = {epoch = epoch, top1 = r.top1, top5 = r.top5, loss = r.loss}
      summary = string.format("%s; val top-1 %.2f%%, top-%d %.2f%%, loss %.4f (%d images, %s)", summary,
        100 * r.top1, r.k, 100 * r.top5, r.loss, r.n, progress.format_time(dl.clock() - t0))
      if r.top1 > best_top1 then best_top1, best_epoch = r.top1, epoch end
    end
    print(summary)
    if tblog then
      local v = val_hist[#val_hist]
      tblog:epoch(epoch, st.mean_loss, v and v.epoch == epoch and v or nil, model)
    end
    save(last_path, {epoch = epoch + 1, batch = 0})
    if val_loader and best_epoch == epoch then save(best_path, {epoch = epoch + 1, batch = 0}) end
    draw_plot()
    if not ctx and dl._train.sigint_pending() > 0 then stopped = "interrupt" break end
  end
  dl._train.sigint_watch(false)
  tdist.finish(ctx)
  loader:close()
  if val_loader then val_loader:close() end
  if tblog then tblog:close() end

  local resume_cmd = string.format("%s %s --resume %s", arg and arg[-1] or "dlua",
    arg and arg[0] or "scripts/train_resnet.lua", last_path)
  if stopped == "interrupt" then
    print(string.format("interrupted at step %d; checkpoint written to %s", step, last_path))
    print("resume with: " .. resume_cmd)
    return 130
  elseif stopped == "max-steps" then
    print(string.format("stopped after %d steps (--max-steps); checkpoint written to %s", step, last_path))
    print("resume with: " .. resume_cmd)
    return 0
  end
  print("Finished Training")
  if #val_hist > 0 then
    local v = val_hist[#val_hist]
    print(string.format("final val top-1: %.2f%% (top-%d %.2f%%, loss %.4f) after %d epochs", 100 * v.top1,
      math.min(5, num_classes), 100 * v.top5, v.loss, v.epoch))
    print(string.format("best val top-1: %.2f%% at epoch %d -> %s", 100 * best_top1, best_epoch, best_path))
  end
  print("checkpoint: " .. last_path)
  if o.plot then print("plot: " .. o.plot) end
  if o.tensorboard then print("tensorboard: " .. o.tensorboard .. " (view with: tensorboard --logdir " .. o.tensorboard .. ")") end
  print(string.format("time: %s", progress.format_time(dl.clock() - t_start)))
  return 0
end

-- A failure: the message (with the rank's prefix), and the other ranks told
-- at once (not at their timeout).
cli.run(PROG, main, arg, function(msg, status)
  pcall(dl._train.sigint_watch, false)
  -- one write: ranks sharing a log must not interleave within a line
  io.stderr:write(tdist.prefix(ctx) .. PROG .. ": " .. msg .. "\n")
  pcall(tdist.report_failure, ctx, PROG .. ": " .. msg)
  os.exit(status, true)
end)

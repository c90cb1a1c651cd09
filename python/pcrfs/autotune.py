"""pcrfs.Autotuner: PCR's fidelity autotuning for your own model and data, driving
the dynamic/ view of a pcrfs mount (see pcrfs(1), "DYNAMIC VIEW" and "PYTHON MODULE").

    import pcrfs, torch, torchvision
    train = torchvision.datasets.ImageFolder("/mnt/in1k/dynamic/train", transform=tf,
                                             loader=pcrfs.pil_loader)
    tuner = pcrfs.Autotuner(train, model, torch.nn.CrossEntropyLoss())
    for epoch in range(epochs):
        result = tuner.step(epoch)    # None when this epoch does not tune
        if result:
            print(result)             # level, similarities, guard
        train_one_epoch(model, loader)

The mount must have been made with -o level=K (that adds dynamic/ and
/.pcrfs/level); the training loader reads dynamic/, the tuner reads the scan views.

PCR's rule (Kuchnik et al., "Progressive Compressed Records", VLDB 2021, section 4.3,
and the authors' training script): after 5 warm-up epochs, and then every epoch,
take a fixed probe of training images (10 batches: 1,280 to 2,560 images); with the
model in train mode and no optimizer step, compute the gradient of the loss over
the probe at full fidelity and at each level; the cosine similarity of a level's
gradient with the full one says how much a step at that level moves the weights
the way full fidelity would. Train on the lowest level whose similarity reaches
the threshold (0.8).

What this implementation does, by default as PCR:
- probe=1280 images, batch_size=128 (PCR's 10 batches), warmup=5, every=1,
  threshold=0.8, model.train() for the gradient passes, no optimizer step;
- the probe is fixed for the tuner's life, chosen by `seed`, and shuffled once
  (PCR permuted it).

Where it departs from PCR, and why:
- the probe is `probe` images drawn at random from the dataset, where PCR read the
  first 1,280 images of its record stream, whole records: PCR's records held the
  images in shuffled order, so those were a random sample of the classes; pcrfs's
  records follow the image tree in name order (mkpcrfs(1)), so a few whole records
  hold a few classes (ImageNet's 1,300 images a class fill about one record of the
  default 1,024). On a two-class test set with 32-image records, five probes of 32
  images made of whole records scored level 1 at 0.79-0.89, five of 32 random
  images 0.12-0.25, against 0.17 on all 400 images: the whole-record probes would
  have chosen level 1. whole_records=True takes whole records in a seeded order
  (the last one cut), PCR's sequential reads, for stores whose records mix the
  classes;
- every level 1..L-1 is scored (`levels=`), where PCR's script scored only levels
  1, 2, 5 and 10 of its 10: pcrfs stores have other scan scripts and level counts
  (mkpcrfs --scans), and a user may pass PCR's subset to save time;
- every level sees the same images in the same order and batches, with the same
  random draws (transform crops, dropout masks), where PCR shuffled each level's
  probe separately: in train mode BatchNorm normalises by batch, so a different
  batching is noise in the similarity that is not the fidelity's;
- the model's state is restored after each pass (weights, gradients, buffers such
  as BatchNorm's running statistics, train/eval mode, the RNGs): PCR's passes left
  the running statistics updated by the probe;
- the chance guard (below) is not in PCR, whose script chose level 1 whenever
  every level scored 1.0;
- the first level whose similarity is >= threshold is chosen; PCR's script
  compared with > (a difference only at equality); when no level reaches it the
  full level is kept (PCR's script raised an error).

The cost of a tuning is one forward and backward pass over the probe per level
scored plus one at full fidelity: ten passes over 1,280 images for a store of the
default scan script (10 levels), every `every` epochs. On a CPU, a smaller `probe`,
fewer `levels=` or a larger `every` cost less, for a noisier choice: the
similarity is measured on `probe` images only.

The chance guard: when the model does no better than chance on the probe at full
fidelity, its gradient does not depend on the images (e.g. only the output bias
learns the class frequencies), every level can score near 1.0, and the rule would pick
level 1 for good. So when the probe accuracy is within two standard errors of the
trivial classifier's (the most frequent class of the probe), or the full gradient
is zero or not finite, step() chooses nothing: it writes the full level and says
so (result.guarded, result.reason). Accuracy is counted when the model's output is
(N, C) scores and the targets are class indices; otherwise only the gradient test
applies. guard=False turns the guard off.

Torch is imported when an Autotuner is made, not when pcrfs is imported.
"""

import math
import os
import random
import time

__all__ = ["Autotuner", "TuneResult"]


class TuneResult:
    """What one tuning found: the level written to the mount and why.

    epoch       the epoch given to step() (None from tune())
    level       the level written to MNT/.pcrfs/level (or that would be, write=False)
    chosen      the level PCR's rule chose, None when the guard held
    similarity  {level: cosine similarity of its probe gradient with the full one}
                (the full level is 1.0 by definition)
    guarded     True when the chance guard held (no level was chosen)
    reason      why this level, in words
    accuracy    probe accuracy at full fidelity (None when not a classifier)
    chance      the trivial classifier's accuracy on the probe (None likewise)
    loss        mean probe loss at full fidelity
    grad_norm   norm of the full-fidelity probe gradient
    probe       number of probe images
    seconds     time the tuning took
    """

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __repr__(self):
        return "TuneResult(%s)" % ", ".join("%s=%r" % kv for kv in sorted(self.__dict__.items()))

    def __str__(self):
        sims = " ".join("%d:%.2f" % (k, s) for k, s in sorted(self.similarity.items()))
        acc = "" if self.accuracy is None else ", probe acc %.3f (chance %.3f)" % (
            self.accuracy, self.chance)
        return "level %d (%s); cos sim %s%s; %d images, %.1f s" % (
            self.level, self.reason, sims, acc, self.probe, self.seconds)


def _record_groups(samples):
    """[[sample index, ...] per record] for @samples ((path, target) on a pcrfs
    mount), in the order of their first sample; a sample whose record is unknown is
    a group of its own."""
    from . import _record_of_paths
    rec_of = _record_of_paths([p for p, _ in samples])
    groups = {}
    for i, (p, _) in enumerate(samples):
        r = rec_of.get(p)
        groups.setdefault(("r", r) if r is not None else ("s", i), []).append(i)
    return list(groups.values())


class Autotuner:
    """PCR's fidelity autotuning (the module docstring says the rule and where this
    departs from it).

    data        a dataset with .samples = [(path, class index), ...] on a view of a
                pcrfs mount (torchvision's ImageFolder or DatasetFolder over
                MNT/dynamic/train), or the path of such an ImageFolder tree (then
                transform= is needed)
    model       a torch.nn.Module; its state is the same after step() as before
    loss_fn     loss_fn(model(x), y) -> a scalar tensor (e.g. nn.CrossEntropyLoss())
    probe       probe images, fixed for the tuner's life (PCR 1,280)
    threshold   cosine similarity a level must reach (PCR 0.8)
    every       tune every N epochs after the warm-up (PCR 1)
    warmup      epochs before the first tuning (PCR 5); step(warmup) tunes first
    batch_size  images per probe batch (PCR: the training batch, 128-256)
    transform   image -> tensor for the probe (default: the dataset's transform,
                with its random draws fixed per image, the same at every level)
    levels      levels to score (default 1..L-1; PCR scored 1, 2, 5 of its 10)
    seed        picks the probe and fixes its random draws
    guard       the chance guard (default on)
    num_workers DataLoader workers that read and decode the probe (default 0)
    device      where the probe batches go (default: the model's parameters')
    whole_records  the probe is whole records, as PCR read it (default: random
                images; the module docstring says why)
    """

    def __init__(self, data, model, loss_fn, probe=1280, threshold=0.8, every=1, warmup=5,
                 batch_size=128, transform=None, levels=None, seed=0, guard=True,
                 num_workers=0, device=None, whole_records=False):
        import torch  # noqa: F401  (fail here, not in the middle of training)
        from . import find_mount, levels as store_levels, pil_loader
        if isinstance(data, (str, bytes, os.PathLike)):
            if transform is None:
                raise ValueError("a path needs transform= (an image -> a tensor of one "
                                 "size for every image)")
            from torchvision.datasets import ImageFolder
            data = ImageFolder(os.fsdecode(data), loader=pil_loader)
        if probe < 1 or batch_size < 1 or every < 1 or warmup < 0:
            raise ValueError("probe, batch_size and every must be >= 1, warmup >= 0")
        if not 0.0 <= threshold <= 1.0:
            raise ValueError("threshold must be in [0, 1]")
        samples = list(getattr(data, "samples", None) or [])
        if not samples:
            raise ValueError("the dataset has no samples (.samples = [(path, target)])")
        self.mnt = find_mount(os.path.dirname(samples[0][0]))
        if not os.path.exists(os.path.join(self.mnt, ".pcrfs", "level")):
            raise ValueError("%s has no dynamic view: mount it with -o level=K "
                             "(pcrfs(1), DYNAMIC VIEW)" % self.mnt)
        self.L = store_levels(self.mnt)
        self.levels = sorted(set(levels)) if levels is not None else list(range(1, self.L))
        if any(not 1 <= k <= self.L for k in self.levels):
            raise ValueError("levels must be in 1..%d" % self.L)
        self.levels = [k for k in self.levels if k != self.L]
        # Each sample as (path below its view, target): the probe reads the same
        # path in scanK/ and full/, whatever view the training reads.
        self.rel = []
        for path, target in samples:
            parts = os.path.relpath(path, self.mnt).split(os.sep, 1)
            if len(parts) != 2 or parts[0] in ("..", ".pcrfs"):
                raise ValueError("%s is not in a view of the mount %s" % (path, self.mnt))
            self.rel.append((parts[1], target))
        for view in ["full"] + ["scan%d" % k for k in self.levels]:
            if not os.path.isdir(os.path.join(self.mnt, view)):
                raise ValueError("%s has no %s/ view" % (self.mnt, view))

        self.model, self.loss_fn = model, loss_fn
        self.threshold, self.every, self.warmup = threshold, every, warmup
        self.batch_size, self.seed, self.guard = batch_size, seed, guard
        self.num_workers, self.device = num_workers, device
        self.whole_records = whole_records
        self.loader = getattr(data, "loader", None) or pil_loader
        self.transform = transform if transform is not None else getattr(data, "transform", None)
        self.target_transform = getattr(data, "target_transform", None)
        self.probe = self._pick_probe(samples, probe)

    def _pick_probe(self, samples, n):
        """@n images drawn at random; with @whole_records, whole records in a seeded
        order until @n images (the last one cut, as PCR took the first n images of
        its record stream), shuffled once."""
        rng = random.Random(self.seed)
        if not self.whole_records:
            return rng.sample(range(len(samples)), min(n, len(samples)))
        groups = _record_groups(samples)
        rng.shuffle(groups)
        idx = []
        for g in groups:
            idx.extend(g)
            if len(idx) >= n:
                break
        idx = idx[:n]
        rng.shuffle(idx)
        return idx

    # ---- schedule ------------------------------------------------------------

    def due(self, epoch):
        """Whether step(@epoch) tunes: at @warmup, then every @every epochs."""
        return epoch >= self.warmup and (epoch - self.warmup) % self.every == 0

    def step(self, epoch):
        """Call before training epoch @epoch (0-based). On a tuning epoch, score the
        levels, write the level to MNT/.pcrfs/level and return a TuneResult;
        otherwise return None and change nothing."""
        if not self.due(epoch):
            return None
        r = self.tune()
        r.epoch = epoch
        return r

    # ---- the rule ------------------------------------------------------------

    def tune(self, write=True):
        """Score the levels now (whatever the epoch) and, with @write, write the
        chosen level to the mount. Returns a TuneResult."""
        import torch
        from . import set_level, level as mount_level
        t0 = time.monotonic()
        model = self.model
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise ValueError("the model has no parameters that require a gradient")
        device = torch.device(self.device) if self.device is not None else params[0].device
        saved_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        saved_grads = [None if p.grad is None else p.grad.detach().clone() for p in params]
        was_training = model.training
        py_state = random.getstate()
        rng_devices = [device.index or 0] if device.type == "cuda" else []
        views = ["full"] + ["scan%d" % k for k in self.levels]
        batches = None
        try:
            with torch.random.fork_rng(devices=rng_devices):
                batches = self._batches(views)
                full, stats = self._gradient(batches, params, device, True)
                model.load_state_dict(saved_state)
                sims = {}
                for k in self.levels:
                    g, _ = self._gradient(batches, params, device, False)
                    model.load_state_dict(saved_state)
                    sims[k] = _cosine(g, full)
                sims[self.L] = 1.0
        finally:
            del batches  # stops the DataLoader's workers
            model.load_state_dict(saved_state)
            for p, g in zip(params, saved_grads):
                p.grad = g
            model.train(was_training)
            random.setstate(py_state)

        norm = float(full.norm())
        acc, chance = stats["accuracy"], stats["chance"]
        guarded, chosen = False, None
        if self.guard and not (math.isfinite(norm) and norm > 0.0):
            guarded, reason = True, "guard: the full-fidelity gradient is %g" % norm
        elif self.guard and acc is not None and acc <= chance + 2.0 * math.sqrt(
                chance * (1.0 - chance) / stats["n"]):
            guarded, reason = True, "guard: probe accuracy %.3f is chance (%.3f)" % (acc, chance)
        else:
            chosen = min(k for k, s in sims.items() if s >= self.threshold or k == self.L)
            reason = ("lowest level with cos sim >= %.2f" % self.threshold if sims[chosen] >=
                      self.threshold else "no level reaches %.2f" % self.threshold)
        lvl = self.L if guarded else chosen
        if write:
            set_level(self.mnt, lvl)
            if mount_level(self.mnt) != lvl:
                raise OSError("%s/.pcrfs/level did not take level %d" % (self.mnt, lvl))
        return TuneResult(epoch=None, level=lvl, chosen=chosen, similarity=sims,
                          guarded=guarded, reason=reason, accuracy=acc, chance=chance,
                          loss=stats["loss"], grad_norm=norm, probe=len(self.probe),
                          seconds=time.monotonic() - t0)

    def _batches(self, views):
        """An iterator of the probe's (images, targets) batches in each of @views in
        turn, from one DataLoader (one set of workers for the whole tuning)."""
        from torch.utils.data import DataLoader
        n = len(self.probe)
        order = [[v * n + i for i in range(a, b)] for v in range(len(views))
                 for a, b in self._spans()]
        return iter(DataLoader(_ProbeView(self, views), batch_sampler=order,
                               num_workers=self.num_workers))

    def _spans(self):
        """The probe's batches as [start, end) ranges; a last batch of one image is
        joined to the one before (BatchNorm1d cannot train on a batch of one)."""
        n, bs = len(self.probe), self.batch_size
        spans = [[a, min(a + bs, n)] for a in range(0, n, bs)]
        if len(spans) > 1 and spans[-1][1] - spans[-1][0] == 1:
            spans[-2][1] = spans[-1][1]
            del spans[-1]
        return spans

    def _gradient(self, batches, params, device, count):
        """The probe's loss gradient over its next view's batches from @batches (train
        mode, summed over the batches of mean losses as PCR's script did), one flat
        vector; with @count also the probe's loss, accuracy and the trivial
        classifier's accuracy."""
        import itertools
        import torch
        torch.manual_seed(self.seed)  # dropout masks: the same draws at every level
        self.model.train()
        for p in params:
            p.grad = None
        loss_sum, right, n, freq, is_cls = 0.0, 0, 0, {}, True
        for x, y in itertools.islice(batches, len(self._spans())):
            x, y = x.to(device), y.to(device)
            out = self.model(x)
            loss = self.loss_fn(out, y)
            loss.backward()
            if count:
                loss_sum += float(loss.detach()) * len(y)
                n += len(y)
                is_cls = is_cls and out.dim() == 2 and y.dim() == 1 and not y.is_floating_point()
                if is_cls:
                    right += int((out.detach().argmax(1) == y).sum())
                    for c in y.tolist():
                        freq[c] = freq.get(c, 0) + 1
        g = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach()
                       .flatten() for p in params]).double()
        for p in params:
            p.grad = None
        stats = None
        if count:
            stats = {"n": n, "loss": loss_sum / max(n, 1),
                     "accuracy": right / n if is_cls and n else None,
                     "chance": max(freq.values()) / n if is_cls and n else None}
        return g, stats


def _cosine(a, b):
    na, nb = float(a.norm()), float(b.norm())
    if not (na > 0.0 and nb > 0.0):
        return 0.0
    return float(a.dot(b)) / (na * nb)


class _ProbeView:
    """The probe's images in @views, view after view, as (tensor, target); each
    image's transform runs under a seed of its own (its place in the probe): the
    same crops and flips at every level and every tuning, in the main process or in
    DataLoader workers."""

    def __init__(self, tuner, views):
        self.roots = [os.path.join(tuner.mnt, v) for v in views]
        self.items = [tuner.rel[i] for i in tuner.probe]
        self.loader, self.transform = tuner.loader, tuner.transform
        self.target_transform, self.seed = tuner.target_transform, tuner.seed

    def __len__(self):
        return len(self.roots) * len(self.items)

    def __getitem__(self, j):
        import torch
        v, i = divmod(j, len(self.items))
        rel, target = self.items[i]
        img = self.loader(os.path.join(self.roots[v], rel))
        if self.transform is not None:
            # Seeded apart from the caller's draws (dropout in the main process).
            state = random.getstate()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed * 1000003 + i)
                random.seed(self.seed * 1000003 + i)
                img = self.transform(img)
            random.setstate(state)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target

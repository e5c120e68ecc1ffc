"""Shared driver of looplm's replication experiments (experiments/*.py): train runs through the
`looplm` binary, evaluate them, summarise over seeds, write a markdown + JSON table and plots.

Only the standard library and the CLI: every number in a table comes from `looplm train` /
`looplm eval --json` / `looplm info --json` / `looplm bench --json`, so a user can rerun any cell
by hand. Runs live in runs/experiments/<name>/<arm>_s<seed> and are resumed, not redone: rerunning
a script after an interruption (or to add seeds) trains only what is missing.

--quick: the same pipeline on a few steps and a small validation slice (about a minute): checks
the script end to end (tests run it); its numbers mean nothing.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("LOOPLM_BIN") or os.path.join(ROOT, "build", "looplm")  # LOOPLM_BIN: another build
# --quick shrinks every model (same layouts, smaller width and context) so the whole pipeline runs
# in about a minute.
QUICK = dict(d_model=32, n_heads=2, context=32, batch_size=4)


def mean_std(xs):
    """Mean and sample standard deviation (n − 1; 0 for one value)."""
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    if not xs:
        return float("nan"), float("nan")
    m = sum(xs) / len(xs)
    s = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, s


def fmt(m, s, digits=4):
    return f"{m:.{digits}f} ± {s:.{digits}f}"


def verdict(ok):
    return "held" if ok else "did not hold"


def pooled(a, b):
    """The pooled spread of two (mean, std) pairs."""
    return math.hypot(a[1], b[1])


def better(a, b):
    """(mean, std) a lower than b by more than their pooled spread."""
    return b[0] - a[0] > pooled(a, b)


def depth_check(deep_label, deep, shallow_label, shallow):
    """The depth-check sentence: does the deeper model's loss beat the shallower's by more than 3x
    the larger seed spread?"""
    margin, spread = shallow[0] - deep[0], max(shallow[1], deep[1], 1e-9)
    return (f"Depth check: {deep_label} {fmt(*deep)} against {shallow_label} {fmt(*shallow)}: {margin:.4f} nats, "
            f"{margin / spread:.1f}x the larger seed spread"
            f"{'' if margin > 3 * spread else ' — depth does NOT clearly matter here'}.")


class Experiment:
    def __init__(self, name, description, default_seeds=3, data="kjv", options=None):
        """data: "kjv", "listops" or None (the script finds its own); options(ap): the script's own flags."""
        ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
        ap.add_argument("--quick", action="store_true", help="a ~1 minute end-to-end check (numbers mean nothing)")
        ap.add_argument("--seeds", type=int, default=None, help=f"seeds per arm (default {default_seeds}; --quick: 2)")
        ap.add_argument("--out", default=None, help="results directory (default experiments/results/NAME, --quick: runs/experiments/quick/NAME)")
        ap.add_argument("--runs", default=None, help="run directories (default runs/experiments/NAME)")
        ap.add_argument("--threads", type=int, default=0, help="looplm --threads (0: adapt)")
        ap.add_argument("--reverse", action="store_true",
                        help="take the seeds and arms last first: a second process (--threads 1) shares the "
                             "training; each run directory is locked while one trains it")
        if options:
            options(ap)
        self.args = ap.parse_args()
        self.name = name
        self.quick = self.args.quick
        self.seeds = list(range(1, 1 + (self.args.seeds or (2 if self.quick else default_seeds))))
        self.order = self.seeds[::-1] if self.args.reverse else self.seeds  # training order only
        sub = os.path.join("quick", name) if self.quick else name
        self.out = os.path.abspath(self.args.out or os.path.join(ROOT, "experiments", "results", name))
        if self.quick and not self.args.out:
            self.out = os.path.join(ROOT, "runs", "experiments", "quick", name, "results")
        self.runs = os.path.abspath(self.args.runs or os.path.join(ROOT, "runs", "experiments", sub))
        os.makedirs(self.out, exist_ok=True)
        os.makedirs(self.runs, exist_ok=True)
        self.t0 = time.time()
        self.new_training = False
        if not os.access(BIN, os.X_OK):
            sys.exit(f"{name}: {BIN} is missing: build first (cmake -S . -B build && cmake --build build)")
        if data == "listops":
            self.train_file, self.val_file = self._listops()
        elif data == "kjv":
            self.train_file, self.val_file = self._data()

    # ------------------------------------------------------------------ data
    def _data(self):
        train = os.path.join(ROOT, "data", "kjv", "train.txt")
        val = os.path.join(ROOT, "data", "kjv", "val.txt")
        if not (os.path.exists(train) and os.path.exists(val)):
            self.log("preparing the KJV corpus (scripts/prepare_kjv.sh)")
            subprocess.run([os.path.join(ROOT, "scripts", "prepare_kjv.sh")], check=True, cwd=ROOT)
        if self.quick:  # a small validation slice keeps the quick mode quick
            small = os.path.join(self.runs, "val_small.txt")
            with open(val, "rb") as f:
                data = f.read(24000)
            with open(small, "wb") as f:
                f.write(data)
            val = small
        return train, val

    def _listops(self):
        """NRGPT's small ListOps set (looplm data listops --preset nrgpt_small, seed 1): train/test."""
        d = os.path.join(ROOT, "data", "listops")
        train, test = os.path.join(d, "train.txt"), os.path.join(d, "test.txt")
        if not (os.path.exists(train) and os.path.exists(test)):
            self.log("generating ListOps (looplm data listops --preset nrgpt_small)")
            self.looplm("data", "listops", "--out", d, "--preset", "nrgpt_small", "--overwrite")
        if self.quick:  # a small test slice keeps the quick mode quick
            small = os.path.join(self.runs, "test_small.txt")
            with open(test) as f:
                lines = f.readlines()[:128]
            with open(small, "w") as f:
                f.writelines(lines)
            test = small
        return train, test

    def ordered(self, arms):
        """arms.items(), last first under --reverse (with the seeds reversed too, a second process
        meets the first one only at the end)."""
        items = list(arms.items())
        return items[::-1] if self.args.reverse else items

    def slice_file(self, src, n, name):
        """The first n bytes of src as <runs>/<name> (written atomically, rewritten when its size is off)."""
        dst = os.path.join(self.runs, name)
        if not os.path.exists(dst) or os.path.getsize(dst) != min(n, os.path.getsize(src)):
            with open(src, "rb") as f:
                data = f.read(n)
            with open(dst + ".tmp", "wb") as f:
                f.write(data)
            os.replace(dst + ".tmp", dst)
        return dst

    def log(self, msg):
        print(f"[{self.name} {time.time() - self.t0:6.0f}s] {msg}", flush=True)

    # ------------------------------------------------------------------ the binary
    def run(self, cmd, capture=True):
        """Run cmd from the project root; its stdout, or exit naming the command when it fails."""
        p = subprocess.run(cmd, cwd=ROOT, capture_output=capture, text=True)
        if p.returncode != 0:
            sys.exit(f"{self.name}: command failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
        return p.stdout

    def looplm(self, *args, capture=True):
        return self.run([BIN, *map(str, args)], capture)

    def train(self, arm, preset, sets, seed, steps):
        """Train (or resume, or reuse) one run; returns its directory."""
        d = os.path.join(self.runs, f"{arm}_s{seed}")
        sets = dict(sets)
        sets.update(seed=seed, steps=steps, data_train=self.train_file, data_val=self.val_file)
        if self.quick:
            sets.update(QUICK, warmup=2, eval_every=steps, eval_batches=1)
        args = ["train", "--preset", preset, "--out", d, "--quiet", "--sample-len", "0", "--threads", self.args.threads]
        for k, v in sets.items():
            args += ["--set", f"{k}={v}"]
        self.run_training(d, [BIN, *map(str, args)], f"{arm} seed {seed}")
        return d

    def run_training(self, d, cmd, label):
        """Run `cmd`, a `looplm train` command (perhaps behind a launcher such as mpirun) writing run
        directory d, under d's lock: resumed when d holds a checkpoint (a finished run is reused, an
        interrupted one continued), started afresh otherwise."""
        metrics = os.path.join(d, "metrics.jsonl")
        with self._lock(d):
            before = os.path.getsize(metrics) if os.path.exists(metrics) else -1
            if os.path.exists(os.path.join(d, "model.safetensors")):
                cmd = cmd + ["--resume"]
            elif os.path.exists(d):
                shutil.rmtree(d)  # a run that never wrote a checkpoint
            t = time.time()
            self.run(cmd)
            if not os.path.exists(metrics) or os.path.getsize(metrics) != before:
                self.new_training = True  # this call trained steps (not only reused a finished run)
        self.log(f"trained {label} ({time.time() - t:.0f}s)")

    class _lock:
        """d.lock, made exclusively, holding our pid: a second process of the same script (--reverse)
        waits for a run another live process trains, then reuses it. A lock whose process is gone is
        taken over."""
        def __init__(self, d):
            self.path = d.rstrip("/") + ".lock"

        def __enter__(self):
            while True:
                try:
                    fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                    os.write(fd, str(os.getpid()).encode())
                    os.close(fd)
                    return self
                except FileExistsError:
                    try:
                        with open(self.path) as f:
                            pid = int(f.read() or 0)
                        os.kill(pid, 0)  # raises when that process is gone
                    except (ValueError, ProcessLookupError, FileNotFoundError):
                        try:
                            os.remove(self.path)  # stale
                        except FileNotFoundError:
                            pass
                        continue
                    time.sleep(5)

        def __exit__(self, *exc):
            os.remove(self.path)

    def evaluate(self, run_dir, depth, data=None, tag=""):
        """looplm eval --json at `depth` on the validation split (or `data`; `tag` names its cache)."""
        cache = os.path.join(run_dir, f"eval{tag}_depth{depth}.json")
        ckpt = os.path.join(run_dir, "model.safetensors")
        if os.path.exists(cache) and os.path.getmtime(cache) >= os.path.getmtime(ckpt):
            with open(cache) as f:
                return json.load(f)
        out = self.looplm("eval", "--checkpoint", run_dir, "--data", data or self.val_file, "--depth", depth,
                          "--json", "--progress", "off", "--threads", self.args.threads)
        j = json.loads(out)
        with open(cache + ".tmp", "w") as f:  # atomically: a second process may read it
            json.dump(j, f)
        os.replace(cache + ".tmp", cache)
        return j

    def info(self, preset, sets=None):
        args = ["info", "--preset", preset, "--json", "--no-measure"]
        for k, v in dict(sets or {}, **(QUICK if self.quick else {})).items():
            args += ["--set", f"{k}={v}"]
        return json.loads(self.looplm(*args))

    # ------------------------------------------------------------------ outputs
    def write(self, results, markdown):
        results = dict(results)
        minutes = round((time.time() - self.t0) / 60, 1)
        prev = os.path.join(self.out, "results.json")
        if not self.new_training and os.path.exists(prev):  # only reused finished runs: keep their time
            with open(prev) as f:
                minutes = max(minutes, json.load(f).get("minutes", 0))
        results.update(experiment=self.name, quick=self.quick, seeds=self.seeds, minutes=minutes)
        with open(os.path.join(self.out, "results.json"), "w") as f:
            json.dump(results, f, indent=1)
        with open(os.path.join(self.out, "results.md"), "w") as f:
            f.write(markdown.rstrip() + "\n")
        self.log(f"wrote {self.out}/results.md and results.json")

    def plot(self, png, script, series):
        """gnuplot `script` with each series written to a data file: series = {name: [rows]}; the
        script refers to them as '$name' (replaced by the file path). Skipped without gnuplot."""
        if not shutil.which("gnuplot"):
            self.log("gnuplot not installed (apt-get install gnuplot-nox): no plot")
            return
        tmp = os.path.join(self.runs, "plot")
        os.makedirs(tmp, exist_ok=True)
        for name, rows in series.items():
            path = os.path.join(tmp, name + ".tsv")
            with open(path, "w") as f:
                for r in rows:
                    f.write("\t".join(str(x) for x in r) + "\n")
            script = script.replace("$" + name, path)
        full = f"set terminal pngcairo size 1000,620 noenhanced font ',11'\nset output '{os.path.join(self.out, png)}'\n" + script
        subprocess.run(["gnuplot"], input=full, text=True, check=True)
        self.log(f"wrote {self.out}/{png}")


# ---------------------------------------------------------------- larger-scale runs (scale.py, scale_systems.py)
def mpi_launcher(ranks, log):
    """The command prefix and looplm --threads for a run of `ranks` MPI ranks (one thread each); one
    process with the same micro-batches (the same bits, docs/training.md) for 1 rank or without mpirun."""
    if ranks == 1:
        return [], 2
    if not shutil.which("mpirun"):
        log("mpirun not found: one process with the same micro-batches (the same bits, docs/training.md)")
        return [], 2
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(ranks)], 1


def training_seconds(train_rows):
    """A run's training time from its metrics' train rows: elapsed_s counts from each start of the
    process, so a resumed run's restart adds from 0 again."""
    total, prev = 0.0, 0.0
    for r in train_rows:
        e = r.get("elapsed_s", 0.0)
        total += e - prev if e >= prev else e
        prev = e
    return total


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def write_json_atomic(path, obj):
    """obj as JSON at path, whole or not at all (a second process may read it)."""
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(path + ".tmp", path)

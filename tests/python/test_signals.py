#!/usr/bin/env python3
"""A real Ctrl-C (SIGINT) during the module's calls (docs/python.md, "How it behaves").

Run by ctest (test `python_signals`) with PYTHONPATH=build/python:
    PYTHONPATH=build/python python3 tests/python/test_signals.py -v

Each case runs a child process (this file with `child MODE DIR`) that prints `ready` once its
call is under way; the test then sends the child SIGINT, as a terminal's Ctrl-C does, and reads what
the child reports on stdout, one JSON object per line. The library's threads must never take the
signal (tools/signals.h: a handler that runs on a compute thread inside a oneDNN JIT kernel
corrupts the heap), so the child also reports the signal mask of every thread its calls started.
"""
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# SIGINT and SIGTERM in a /proc SigBlk mask
STOP_MASK = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1))
STEPS = 120
TINY = {"d_model": 32, "n_heads": 2, "d_ff": 64, "context": 32, "n_prelude": 1, "n_core": 1, "n_coda": 1, "R": 3,
        "batch_size": 4, "steps": STEPS, "eval_every": 60, "eval_batches": 2, "lr": 3e-3, "warmup": 4, "log_every": 1}


def corpus(lines, seed=7):
    words = "the lord said unto moses and aaron go in to pharaoh and let my people go that they may serve me".split()
    rng = np.random.default_rng(seed)
    return "".join(" ".join(rng.choice(words, 9)) + f" {i % 7}.\n" for i in range(lines))


def threads():
    return set(os.listdir("/proc/self/task"))


def blocked(tid):
    """The thread's blocked-signal mask; None when it has ended (between the listing and now)."""
    try:
        with open(f"/proc/self/task/{tid}/status") as f:
            for line in f:
                if line.startswith("SigBlk:"):
                    return int(line.split()[1], 16)
    except (FileNotFoundError, ProcessLookupError):
        return None
    return 0


def masks_of(tids):
    return {t: m for t, m in ((t, blocked(t)) for t in tids) if m is not None}


def say(**kw):
    print(json.dumps(kw), flush=True)


def child(mode, d):
    import looplm

    before = threads()
    ours = set()  # Python threads this child starts (one that has ended may still be listed)
    cfg = dict(TINY, data_train=os.path.join(d, "train.txt"), data_val=os.path.join(d, "val.txt"))
    run = os.path.join(d, "run")
    t0 = None
    try:
        if mode in ("train", "train_callback"):
            ready = []

            def mark(step):  # `ready` once training is under way (and no more output from here)
                if step >= 3 and not ready:
                    ready.append(1)
                    say(ready=True)

            if mode == "train":  # no callback: only the waiting thread sees the signal
                looplm.train(cfg, out=run, log=lambda line: mark(int(line.split()[1].split("/")[0]) if line.startswith("step") else 0))
            else:
                looplm.train(cfg, out=run, quiet=True, callback=lambda s: mark(s["step"]))
        else:
            m = looplm.from_config(dict(TINY), seed=3)
            want = m.generate("the lord", max_tokens=40, temperature=0)
            if mode == "generate":
                say(ready=True)
                m.generate("the lord", max_tokens=10 ** 7, temperature=0.8)
            elif mode == "generate_batch":
                say(ready=True)
                m.generate(["the lord", "moses"], max_tokens=10 ** 7, temperature=0.8, on_text=lambda i, t: None)
            elif mode == "queued":  # behind another thread's call: dropped at once, that call goes on
                let_go = threading.Event()

                def stop(t):
                    if let_go.is_set():
                        raise RuntimeError("the other call ends")

                def other():
                    ours.add(str(threading.get_native_id()))  # joined below: not a library thread
                    with contextlib.suppress(RuntimeError):
                        m.generate("moses", max_tokens=10 ** 7, temperature=0.8, on_token=stop)

                th = threading.Thread(target=other)
                th.start()
                time.sleep(0.2)
                say(ready=True)
                try:
                    m.generate("the lord", max_tokens=40)
                finally:
                    let_go.set()
                    th.join()
            elif mode == "evaluate":
                with open(os.path.join(d, "train.txt")) as f:
                    text = f.read() * 50
                say(ready=True)
                m.evaluate(text)
        say(raised=False)
        return
    except KeyboardInterrupt:
        python_threads = {str(t.native_id) for t in threading.enumerate()} | ours
        say(raised=True, masks=masks_of(threads() - before - python_threads))
    if mode.startswith("train"):
        with open(os.path.join(run, "checkpoint.json")) as f:
            step = json.load(f)["step"]
        r = looplm.train(out=run, resume=True, quiet=True)
        say(step=step, resumed_to=r["steps_done"], complete=r["complete"])
    else:
        say(again=m.generate("the lord", max_tokens=40, temperature=0) == want)


class CtrlC(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="looplm_sig_")
        with open(os.path.join(cls.dir, "train.txt"), "w") as f:
            f.write(corpus(400))
        with open(os.path.join(cls.dir, "val.txt"), "w") as f:
            f.write(corpus(60, seed=8))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def interrupt(self, mode, delay=0.0):
        """Runs the child, sends it SIGINT `delay` s after its `ready`: its reports, and how long the
        KeyboardInterrupt took to come."""
        d = tempfile.mkdtemp(dir=self.dir)
        for name in ("train.txt", "val.txt"):
            shutil.copy(os.path.join(self.dir, name), d)
        with subprocess.Popen([sys.executable, os.path.abspath(__file__), "child", mode, d], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) as p:
            try:
                first = json.loads(p.stdout.readline() or "{}")
                self.assertTrue(first.get("ready"), f"{mode}: {first} {p.stderr.read() if p.poll() is not None else ''}")
                time.sleep(delay)
                sent = time.monotonic()
                p.send_signal(signal.SIGINT)
                second = json.loads(p.stdout.readline() or "{}")
                took = time.monotonic() - sent
                rest = [json.loads(line) for line in p.stdout]
                err = p.stderr.read()
                self.assertEqual(p.wait(timeout=60), 0, f"{mode}: {err}")
            finally:
                if p.poll() is None:  # (a failed check: no child left behind)
                    p.kill()
        if os.environ.get("LOOPLM_SIGNAL_TIMES"):
            print(f"\n{mode}: KeyboardInterrupt {took * 1000:.0f} ms after SIGINT", file=sys.stderr)
        self.assertTrue(second.get("raised"), f"{mode}: no KeyboardInterrupt: {second} {err}")
        # every thread the library started (its own, OpenMP's) blocks SIGINT and SIGTERM
        self.assertTrue(second["masks"], mode)
        for tid, mask in second["masks"].items():
            self.assertEqual(mask & STOP_MASK, STOP_MASK, f"{mode}: thread {tid} takes SIGINT/SIGTERM (SigBlk {mask:#x})")
        return d, rest, took

    def check_resumed(self, d, rest):
        self.assertEqual(len(rest), 1, rest)
        r = rest[0]
        self.assertTrue(3 <= r["step"] < STEPS, r)  # a checkpoint of where it stopped
        self.assertEqual((r["resumed_to"], r["complete"]), (STEPS, True))
        # the weights of the interrupted and resumed run are those of a run never interrupted
        import looplm
        ref = os.path.join(d, "ref")
        looplm.train(dict(TINY, data_train=os.path.join(d, "train.txt"), data_val=os.path.join(d, "val.txt")),
                     out=ref, quiet=True)
        a, b = looplm.load(os.path.join(d, "run")), looplm.load(ref)
        ids = a.tokenize("let my people go")
        np.testing.assert_array_equal(a.logits(ids), b.logits(ids))
        with open(os.path.join(d, "run", "model.safetensors"), "rb") as f, open(os.path.join(ref, "model.safetensors"), "rb") as g:
            self.assertEqual(f.read(), g.read())

    def test_train_stops_with_a_checkpoint_and_resumes_bit_exactly(self):
        d, rest, took = self.interrupt("train")
        self.assertLess(took, 2.0)
        self.check_resumed(d, rest)

    def test_train_with_a_callback(self):
        d, rest, took = self.interrupt("train_callback", delay=0.02)
        self.assertLess(took, 2.0)
        self.check_resumed(d, rest)

    def test_generate_ends_promptly_and_the_model_generates_again(self):
        for mode in ("generate", "generate_batch", "queued"):
            _, rest, took = self.interrupt(mode, delay=0.3)
            self.assertLess(took, 1.5, mode)
            self.assertEqual(rest, [{"again": True}], mode)

    def test_evaluate_ends_promptly(self):
        _, rest, took = self.interrupt("evaluate", delay=0.3)
        self.assertLess(took, 1.5)
        self.assertEqual(rest, [{"again": True}])


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "child":
        child(sys.argv[2], sys.argv[3])
    else:
        unittest.main()

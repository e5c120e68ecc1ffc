#!/usr/bin/env python3
"""Every code block of README.md and docs/*.md, executed (ctest docs_examples), so no example rots.

Each fenced block names its kind: `sh` (commands), `python`, `cpp`, `cmake`, or `text` (output,
formats, diagrams: not run); a block without one fails. Each document runs in its own sandbox
directory, as a newcomer's checkout would look after the demo:

* `build/` is the build directory under test (and on PATH, so `looplm ...` lines work too), `data/kjv`
  the KJV corpus cut short (400 kB and 40 kB), `configs/` the presets; small text files stand in for the examples'
  own (mytext.txt, mine.txt, train.txt, prompts.txt, questions.txt, ...), GPT-2's tokenizer.json
  for `tokenizer.json`; HOME is the sandbox, where `~/models/Ouro-1.4B` and `~/models/Qwen` are the
  small Hugging Face-shaped models of tests/fixtures/hf/.
* A run directory a command reads but no earlier line wrote (runs/looped: the demo's; runs/mine,
  runs/gated, runs/llama, runs/ouro, runs/qwen) is made first: two training steps of that model,
  or a conversion of the fixture.
* What is changed to keep it short, and only that: `train` takes 2 steps (`--steps 2`; a Python
  config's "steps": 2), `bench` one short repetition, `serve` a free port (the lines after it call
  that port) and it is stopped at the block's end.

`sh` lines run with bash in the sandbox: those of `looplm` (build/looplm or looplm), `python3 -c`
with the built module, and `curl` against the server the block started (or, when an earlier block did, one serving runs/looped). Lines are not run when they
hold a placeholder (FILE, DIR, [option], A|B), or run another program whose own test covers it
(the demo, the test suite, apt, cmake, pip, mpirun, g++, experiments, lm_eval, ollama: the reason
is printed). `python` blocks run with the built module (PYTHONPATH), `cpp` blocks with a main() are
compiled against the build's liblooplm.so and run. A line fails on a non-zero exit; its output is
shown.

Usage: tests/docs_examples.py BUILD_DIR [DOC ...]
"""
import glob
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.realpath(sys.argv[1])
DOCS = sys.argv[2:] or ["README.md"] + sorted(os.path.relpath(p, SRC) for p in glob.glob(os.path.join(SRC, "docs", "*.md")))
KINDS = {"sh", "python", "cpp", "cmake", "text"}
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

# Programs whose lines are not run here, and why.
NOT_RUN = {
    "scripts/demo.sh": "the demo (minutes; CI runs its parts)",
    "scripts/test.sh": "the test suite itself",
    "scripts/install_deps.sh": "apt (CI runs it)",
    "scripts/prepare_kjv.sh": "ctest experiments_data runs it",
    "scripts/prepare_corpus.sh": "downloads Debian packages (ctest corpus_small)",
    "sudo": "apt", "cmake": "the build (ctest install builds a consumer)", "python3 -m venv": "ctest pip_install",
    "mpirun": "ctest mpi_train", "g++": "ctest install (pkg-config)", "export": "ctest install (pkg-config)",
    "LD_LIBRARY_PATH": "ctest install (pkg-config)", "~/venvs": "ctest pip_install", "experiments/": "hours of training",
    "lm_eval": "not installable here (tests/test_serve.cpp replays its requests)", "printf": "ollama (not installed)",
    "ollama": "not installed", "python3 bench/": "benchmarks against PyTorch (minutes)",
}
# Lines that need what the stand-ins lack, by a piece of their text.
NEEDS = {"--logit-bias 151643": "Ouro-1.4B's own token id (the stand-in's vocabulary has 272)",
         "configs/corpus/": "the larger corpus (scripts/prepare_corpus.sh downloads it)",
         "--window 1024": "Ouro-1.4B's context (the stand-in's is 64)"}
PLACEHOLDER = re.compile(r"\b(FILE|DIR|PATH|NEW_DIR|KEY|PREFIX)\b|\[-|\[--|\|(fp32|bf16)|\bN\b")


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def blocks(doc):
    """(line number, kind, text) of each fenced block."""
    out, kind, start, body = [], None, 0, []
    for i, line in enumerate(open(os.path.join(SRC, doc), encoding="utf-8").read().split("\n"), 1):
        if line.startswith("```"):
            if kind is None:
                kind, start, body = line[3:].strip(), i, []
            else:
                out.append((start, kind, "\n".join(body)))
                kind = None
        elif kind is not None:
            body.append(line)
    return out


def commands(text):
    """The block's command lines, continuation lines joined, comments kept (bash drops them)."""
    lines, cur = [], ""
    for line in text.split("\n"):
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        cur += line
        if cur.strip():
            lines.append(cur.strip())
        cur = ""
    return lines


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sandbox:
    def __init__(self, doc):
        self.dir = tempfile.mkdtemp(prefix="looplm_docs_")
        self.doc = doc
        d = self.dir
        os.symlink(BUILD, os.path.join(d, "build"))
        os.symlink(os.path.join(SRC, "configs"), os.path.join(d, "configs"))
        os.makedirs(os.path.join(d, "data", "kjv"))
        kjv = os.path.join(SRC, "data", "kjv")
        # The corpus cut short (400 kB to train on, 40 kB to validate): evaluations over the whole
        # validation text would take most of the time.
        val = open(os.path.join(kjv, "val.txt"), encoding="utf-8").read()
        train = open(os.path.join(kjv, "train.txt"), encoding="utf-8").read()
        open(os.path.join(d, "data", "kjv", "train.txt"), "w", encoding="utf-8").write(train[:400000])
        open(os.path.join(d, "data", "kjv", "val.txt"), "w", encoding="utf-8").write(val[:40000])
        for name in ("mytext.txt", "mine.txt", "corpus.txt", "train.txt", "text.txt", "calib.txt"):
            open(os.path.join(d, name), "w", encoding="utf-8").write(val[:60000])
        open(os.path.join(d, "val.txt"), "w", encoding="utf-8").write(val[60000:80000])
        open(os.path.join(d, "prompts.txt"), "w").write("And God said\nIn the beginning\n")
        open(os.path.join(d, "prompts.jsonl"), "w").write('{"prompt": "And God said"}\n')
        open(os.path.join(d, "questions.txt"), "w").write("Who led Israel out of Egypt?\nAnd then?\n")
        import lzma
        gpt2 = lzma.open(os.path.join(SRC, "tests", "fixtures", "tokenizer_parity", "gpt2.tokenizer.json.xz")).read()
        open(os.path.join(d, "tokenizer.json"), "wb").write(gpt2)
        os.makedirs(os.path.join(d, "models"))
        shutil.copytree(os.path.join(SRC, "tests", "fixtures", "hf", "ouro"), os.path.join(d, "models", "Ouro-1.4B"))
        shutil.copytree(os.path.join(SRC, "tests", "fixtures", "hf", "qwen2"), os.path.join(d, "models", "Qwen"))
        self.env = dict(os.environ, HOME=d, PATH=BUILD + os.pathsep + os.environ.get("PATH", ""),
                        PYTHONPATH=os.path.join(BUILD, "python"), OMP_NUM_THREADS="1")
        self.server = None
        self.port = None
        self.made = set()  # run directories made here, not by the document's own lines

    def sh(self, line, what, check=True, timeout=600):
        t0 = time.time()
        p = subprocess.run(["bash", "-c", line], cwd=self.dir, env=self.env, capture_output=True, timeout=timeout)
        if check and p.returncode != 0:
            fail(f"{what}: `{line}` exited {p.returncode}:\n{p.stdout.decode(errors='replace')[-1500:]}\n"
                 f"{p.stderr.decode(errors='replace')[-2500:]}")
        return p, time.time() - t0

    # The run directories examples read, made as the docs say they were made (2 steps).
    MADE_BY = {
        "looped": "looplm train --preset looped --steps 2 --out runs/looped",
        "mine": "looplm train --data mytext.txt --steps 2 --out runs/mine",
        "gated": "looplm train --preset looped --set exit_gate=true --steps 2 --out runs/gated",
        "llama": "looplm train --preset llama --data mytext.txt --steps 2 --out runs/llama",
        "ouro": "looplm convert --from ~/models/Ouro-1.4B --out runs/ouro",
        "qwen": "looplm convert --from ~/models/Qwen --out runs/qwen",
    }

    def prepare(self, line):
        """Make the run directories `line` reads (not those it writes with --out)."""
        out = re.search(r"--out\s+(\S+)", line)
        written = out.group(1).rstrip("/") if out else None
        if written in self.made:  # the document makes it itself, after a line that used it
            shutil.rmtree(os.path.join(self.dir, written))
            self.made.discard(written)
        for name in re.findall(r"\bruns/([A-Za-z0-9_-]+)", line):
            path = os.path.join(self.dir, "runs", name)
            if f"runs/{name}" == written or os.path.exists(path) or name not in self.MADE_BY:
                continue
            self.sh(self.MADE_BY[name] + " --quiet" * (not self.MADE_BY[name].startswith("looplm convert")),
                    f"{self.doc}: making runs/{name}")
            self.made.add(f"runs/{name}")
        if "mine.gguf" in line and not line.split("#")[0].strip().startswith("build/looplm export") and \
                not os.path.exists(os.path.join(self.dir, "mine.gguf")):
            self.prepare("runs/llama")
            self.sh("looplm export --checkpoint runs/llama --format gguf --out mine.gguf", f"{self.doc}: making mine.gguf")
        if "model.gguf" in line and not os.path.exists(os.path.join(self.dir, "model.gguf")):
            self.prepare("runs/llama")
            self.sh("looplm export --checkpoint runs/llama --format gguf --out model.gguf", f"{self.doc}: making model.gguf")

    def shortened(self, line):
        """The changes that keep a line short (module docstring)."""
        words = line.split()
        cmd = words[1] if len(words) > 1 else ""
        if cmd == "train" and "--help-config" not in line and "--print-config" not in line:
            line = re.sub(r"--steps\s+\d+", "", line)
            line = re.sub(r"(looplm train)", r"\1 --steps 2", line, count=1)
        if cmd == "bench":  # each cap where the line does not set it
            caps = [c for c in (["-r", "1"], ["--steps", "1"], ["-p", "8"], ["-n", "8"], ["--weights", "none"], ["--gen-batch", "1"])
                    if not re.search(r"(^|\s)" + re.escape(c[0]) + r"\s", line)]
            line = re.sub(r"(looplm bench)", r"\1 " + " ".join(" ".join(c) for c in caps), line, count=1)
        if cmd == "serve":
            self.port = free_port()
            line = re.sub(r"\s*&\s*$", "", line) + f" --port {self.port}"
        if self.port:
            line = line.replace("127.0.0.1:8080", f"127.0.0.1:{self.port}")
        return line

    def start_server(self, line):
        self.server = subprocess.Popen(["bash", "-c", "exec " + line], cwd=self.dir, env=self.env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        end = time.time() + 60
        while time.time() < end:
            p = subprocess.run(["curl", "-sf", f"127.0.0.1:{self.port}/health"], capture_output=True)
            if p.returncode == 0:
                return
            if self.server.poll() is not None:
                fail(f"{self.doc}: `{line}` ended: {self.server.stderr.read().decode(errors='replace')[-2000:]}")
            time.sleep(0.2)
        fail(f"{self.doc}: `{line}` did not answer /health within 60 s")

    def stop_server(self):
        if self.server:
            self.server.terminate()
            self.server.wait(timeout=30)
            self.server, self.port = None, None


def why_not_run(line):
    for prog, why in NOT_RUN.items():
        if line.startswith(prog):
            return why
    for piece, why in NEEDS.items():
        if piece in line:
            return why
    if PLACEHOLDER.search(line.split(" #")[0]):
        return "a placeholder"
    if line.startswith(("build/looplm", "looplm ", "PYTHONPATH=build/python python3 -c", "curl ")):
        return None
    return "not a looplm command"


def run_sh(sb, start, text, counts):
    for line in commands(text):
        why = why_not_run(line)
        if why is None and line.startswith("curl") and not sb.port:  # a server the page started before: the demo's model
            sb.prepare("runs/looped")
            sb.port = free_port()
            sb.start_server(f"looplm serve --checkpoint runs/looped --port {sb.port}")
        if why:
            counts.setdefault(why, []).append(f"{sb.doc}:{start}")
            continue
        line = line.replace("build/looplm", "looplm", 1) if line.startswith("build/looplm") else line
        sb.prepare(line)
        line = sb.shortened(line)
        if line.split()[:2] == ["looplm", "serve"]:
            sb.start_server(line)
            counts.setdefault("run", []).append(line)
            continue
        _, secs = sb.sh(line, f"{sb.doc}:{start}")
        counts.setdefault("run", []).append(line)
        print(f"  {secs:5.1f} s  {line[:150]}")
    sb.stop_server()


def run_python(sb, start, text, counts):
    for name in re.findall(r"runs/([A-Za-z0-9_-]+)", text):
        sb.prepare(f"runs/{name}")
    code = re.sub(r'"steps":\s*\d+', '"steps": 2', text)
    path = os.path.join(sb.dir, f"block_{start}.py")
    open(path, "w", encoding="utf-8").write(code)
    t0 = time.time()
    p = subprocess.run([PY, path], cwd=sb.dir, env=sb.env, capture_output=True, timeout=600)
    if p.returncode != 0:
        fail(f"{sb.doc}:{start}: the python block exited {p.returncode}:\n{p.stderr.decode(errors='replace')[-3000:]}")
    counts.setdefault("run", []).append(f"{sb.doc}:{start} (python)")
    print(f"  {time.time() - t0:5.1f} s  python block at {sb.doc}:{start}")


def run_cpp(sb, start, text, counts):
    if "int main" not in text:
        counts.setdefault("a fragment (not a program)", []).append(f"{sb.doc}:{start}")
        return
    sb.prepare("runs/mine")
    src = os.path.join(sb.dir, f"block_{start}.cpp")
    open(src, "w", encoding="utf-8").write(text)
    exe = os.path.join(sb.dir, f"block_{start}")
    lib = os.path.join(BUILD, "liblooplm.so")
    if not os.path.exists(lib):
        counts.setdefault("no liblooplm.so in this build", []).append(f"{sb.doc}:{start}")
        return
    sb.sh(f"g++ -std=c++20 -O1 -I{SRC}/include {src} -o {exe} -L{BUILD} -llooplm -Wl,-rpath,{BUILD}", f"{sb.doc}:{start} (compile)")
    p, secs = sb.sh(f"{exe} runs/mine 'Once upon a time'", f"{sb.doc}:{start} (run)")
    counts.setdefault("run", []).append(f"{sb.doc}:{start} (cpp)")
    print(f"  {secs:5.1f} s  cpp block at {sb.doc}:{start}: {p.stdout.decode(errors='replace')[:60]!r}")


def main():
    if not os.path.exists(os.path.join(SRC, "data", "kjv", "val.txt")):
        fail("data/kjv is missing (scripts/prepare_kjv.sh; ctest experiments_data makes it)")
    untagged = [f"{doc}:{start} ('{kind}')" for doc in DOCS for start, kind, _ in blocks(doc) if kind not in KINDS]
    if untagged:
        fail("code blocks must say what they are (" + ", ".join(sorted(KINDS)) + "): " + ", ".join(untagged))
    counts = {}
    for doc in DOCS:
        todo = [b for b in blocks(doc) if b[1] in ("sh", "python", "cpp", "cmake")]
        if not todo:
            continue
        print(f"{doc}:")
        sb = Sandbox(doc)
        try:
            for start, kind, text in todo:
                if kind == "sh":
                    run_sh(sb, start, text, counts)
                elif kind == "python":
                    run_python(sb, start, text, counts)
                elif kind == "cpp":
                    run_cpp(sb, start, text, counts)
                else:
                    counts.setdefault("cmake: tests/consumer/CMakeLists.txt, built by ctest install", []).append(f"{doc}:{start}")
        finally:
            sb.stop_server()
            shutil.rmtree(sb.dir, ignore_errors=True)
    ran = len(counts.pop("run", []))
    print(f"ok: {ran} lines and blocks of the documentation ran")
    for why, where in sorted(counts.items()):
        print(f"  not run ({why}): {len(where)}: {', '.join(sorted(set(where)))}")


if __name__ == "__main__":
    main()

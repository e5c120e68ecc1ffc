#!/usr/bin/env python3
"""`looplm chat` driven as a person and as a script would (docs/cli.md, "chat"; ctest chat_terminal).

On a pipe: one answer per line of input and nothing else on stdout; each greedy answer is exactly
what `looplm generate` makes from the conversation rendered in the template (ChatML here: the
model has none, and the note says so), the second turn with the first exchange in its history,
and /reset forgets it. In a pseudo-terminal (pty.fork: the child's controlling terminal): the
prompt, a streamed answer, Ctrl-C (the terminal's ^C, a real SIGINT) stops a long answer and the
chat goes on, /exit ends it with status 0; Ctrl-D at the prompt too.

Usage: tests/chat_terminal.py LOOPLM_BINARY
"""
import os
import pty
import random
import select
import subprocess
import sys
import tempfile
import time

BIN = os.path.realpath(sys.argv[1])


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run(args, stdin=""):
    p = subprocess.run([BIN] + args, input=stdin.encode(), capture_output=True, timeout=300)
    if p.returncode != 0:
        fail(f"looplm {' '.join(args)} exited {p.returncode}: {p.stderr.decode()[-2000:]}")
    return p.stdout.decode(), p.stderr.decode()


def chatml(turns):
    text = "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in turns)
    return text + "<|im_start|>assistant\n"


def generated(ckpt, prompt, n):
    out, _ = run(["generate", "--checkpoint", ckpt, "-p", prompt, "-n", str(n), "--temperature", "0",
                  "--stop", "<|im_end|>", "--quiet", "-t", "1"])
    if not out.startswith(prompt) or not out.endswith("\n"):
        fail(f"generate printed {out!r}")
    return out[len(prompt):-1]


def read_until(fd, marker, timeout):
    """The pty's output up to and including `marker` (bytes), within `timeout` seconds."""
    got = b""
    end = time.time() + timeout
    while marker not in got:
        left = end - time.time()
        if left <= 0:
            fail(f"no {marker!r} within {timeout} s; the terminal showed {got[-600:]!r}")
        r, _, _ = select.select([fd], [], [], left)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                fail(f"the chat ended before {marker!r}; the terminal showed {got[-600:]!r}")
            if not chunk:
                fail(f"the chat ended before {marker!r}; the terminal showed {got[-600:]!r}")
            got += chunk
    return got


def wait_exit(pid, timeout):
    end = time.time() + timeout
    while time.time() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.05)
    os.kill(pid, 9)
    fail(f"the chat did not end within {timeout} s")


def main():
    work = tempfile.mkdtemp()
    # A model that has learnt something of ChatML: 400 steps on conversations whose answer repeats
    # the question and adds a word, so its answers differ with the conversation and end with
    # <|im_end|> (~15 s).
    r = random.Random(1)
    words = "in the beginning god created heaven and earth light darkness water firmament day night".split()
    with open(f"{work}/chat.txt", "w") as f:
        for _ in range(1500):
            u = " ".join(r.choice(words) for _ in range(r.randint(1, 4)))
            f.write(chatml([("user", u)]) + f"{u} {r.choice(words)}<|im_end|>\n")
    common = ["--preset", "looped", "--set", "R=2", "--set", "n_core=1", "--data", f"{work}/chat.txt",
              "--sample-len", "0", "--quiet", "-t", "1"]
    ckpt = f"{work}/run"
    run(["train"] + common + ["--set", "d_model=64", "--set", "n_heads=4", "--set", "context=256", "--set", "batch_size=8",
                              "--set", "lr=0.005", "--steps", "400", "--out", ckpt])

    # A pipe: answers only, each the generate of the rendered conversation.
    n = 40
    out, err = run(["chat", "--checkpoint", ckpt, "--temperature", "0", "-n", str(n), "-t", "1"],
                   "the light\ngod\n/reset\ngod\n")
    if "no chat template" not in err:
        fail(f"no note that the model has no chat template: {err!r}")
    lines = out.split("\n")
    if len(lines) != 4 or lines[3] != "":
        fail(f"3 answers (3 lines) expected on stdout, got {out!r}")
    a1 = generated(ckpt, chatml([("user", "the light")]), n)
    if lines[0] != a1:
        fail(f"turn 1: chat {lines[0]!r}, generate {a1!r}")
    a2 = generated(ckpt, chatml([("user", "the light"), ("assistant", a1.strip()), ("user", "god")]), n)
    if lines[1] != a2:
        fail(f"turn 2 (with the history): chat {lines[1]!r}, generate {a2!r}")
    a3 = generated(ckpt, chatml([("user", "god")]), n)
    if lines[2] != a3:
        fail(f"after /reset: chat {lines[2]!r}, generate {a3!r} (a fresh conversation)")
    if a2 == a3:  # (training is bit-exact per CPU, not across CPUs: another CPU's model may answer alike)
        print(f"note: turn 2's answer is the same with and without the history here ({a2!r})")
    print(f"ok: pipe: 3 answers, each generate's for its conversation ({a1!r}, {a2!r}, {a3!r})")

    # The history within the context: a long conversation keeps going, the oldest exchanges forgotten.
    many = "".join(f"{' '.join(r.choice(words) for _ in range(12))}\n" for _ in range(12))
    out, err = run(["chat", "--checkpoint", ckpt, "--temperature", "0", "-n", "40", "-t", "1"], many)
    if out.count("\n") != 12:
        fail(f"12 answers expected, got {out.count(chr(10))} lines")
    if "no longer fit the context" not in err:
        fail(f"12 exchanges in 256 tokens forgot nothing? {err[-500:]!r}")
    print("ok: the oldest exchanges are forgotten when the context is full, and it says so")

    # A terminal: long answers (a 2048-token context, 200 loop steps per token) to stop with ^C.
    long_ckpt = f"{work}/long"
    run(["train"] + common + ["--set", "d_model=32", "--set", "n_heads=2", "--set", "context=2048", "--set", "batch_size=1",
                              "--steps", "2", "--out", long_ckpt])
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(BIN, [BIN, "chat", "--checkpoint", long_ckpt, "--temperature", "0", "-n", "2000", "--depth", "200",
                       "-t", "1"])
    banner = read_until(fd, b"> ", 60)
    if b"/reset" not in banner:
        fail(f"no banner naming /reset: {banner!r}")
    os.write(fd, b"the light\n")
    read_until(fd, b"the light\r\n", 10)  # the terminal's echo
    time.sleep(0.5)  # the answer streams
    os.write(fd, b"\x03")  # ^C: the terminal sends SIGINT to the chat
    t0 = time.time()
    shown = read_until(fd, b"> ", 30)
    if b"(stopped)" not in shown:
        fail(f"^C during an answer did not say (stopped): {shown[-300:]!r}")
    print(f"ok: ^C stopped a long answer within {time.time() - t0:.2f} s and the chat asked for more")
    os.write(fd, b"day\n")
    shown = read_until(fd, b"> ", 120)
    if b"tokens/s" not in shown:
        fail(f"the next answer showed no timing line: {shown[-300:]!r}")
    os.write(fd, b"/exit\n")
    status = wait_exit(pid, 30)
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        fail(f"/exit ended the chat with status {status}")
    print("ok: the chat went on after ^C, and /exit ended it with 0")

    pid, fd = pty.fork()
    if pid == 0:
        os.execv(BIN, [BIN, "chat", "--checkpoint", ckpt, "--quiet", "-t", "1"])
    read_until(fd, b"> ", 60)
    os.write(fd, b"\x04")  # ^D: the end of input
    status = wait_exit(pid, 30)
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        fail(f"^D ended the chat with status {status}")
    print("ok: ^D at the prompt ends the chat with 0")

    # Bad input: a bad JSON for the template's variables is a usage error (exit 2).
    p = subprocess.run([BIN, "chat", "--checkpoint", ckpt, "--chat-template-kwargs", "[1]"], input=b"",
                       capture_output=True, timeout=60)
    if p.returncode != 2 or b"JSON object" not in p.stderr:
        fail(f"--chat-template-kwargs [1]: exit {p.returncode}, {p.stderr!r}")
    print("ok: a bad --chat-template-kwargs is refused (exit 2)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Turns the extracted Debian packages of scripts/prepare_corpus.sh into train.txt and val.txt.

    corpus_text.py --root DIR --out DIR SOURCE...       (called by scripts/prepare_corpus.sh)

SOURCE is `dict:NAME` (DIR/dict-NAME/usr/share/dictd/NAME.{index,dict.dz}), `kjv` (the King James
Bible through the extracted `bible` program of bible-kjv over bible-kjv-text's data) or
`html:PKG:GLOB` (the HTML pages of DIR/PKG matching GLOB, in sorted path order). Sources are
read in the order given; the output is a pure function of the packages' files (no clock, no
locale, no hash-seed dependence), so the same packages give the same bytes.

* A document is one dictionary entry (the distinct (offset, length) blocks of NAME.index, in file
  order, the 00-database-* header entries skipped), one Bible chapter or one HTML page (its text
  outside <pre>, <script>, <style> and <head>; each block element a paragraph).
* Markup is stripped per source (below); every paragraph is reflowed onto one line (whitespace
  runs become one space). Paragraphs are separated by "\n", documents by a blank line.
* Exact-duplicate removal: a paragraph of 30 or more characters that already appeared earlier
  (in any document, any source) is dropped; a document left without a paragraph of 30 or more
  characters (a headword alone, an entry with no text) is dropped. WordNet
  repeats each gloss under every synonym, and GCIDE holds much of WordNet 1.5: without this the
  validation text would repeat training text verbatim.
* Split: the kept documents are numbered 0, 1, 2, ... in order over all sources; document i goes
  to val.txt when i % 100 == 99 (every 100th, 1%), otherwise to train.txt.

Prints a JSON summary (per source: documents, bytes; totals) on stdout.
"""
import argparse
import base64
import glob
import gzip
import html
import json
import os
import re
import subprocess
import sys

B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
VAL_EVERY = 100
DEDUP_MIN_CHARS = 30


def b64num(s):
    n = 0
    for ch in s:
        n = n * 64 + B64.index(ch)
    return n


def dict_entries(root, name):
    """The entries of a dictd database in file order: distinct (offset, length) blocks of the index."""
    base = os.path.join(root, f"dict-{name}", "usr", "share", "dictd", name)
    with gzip.open(base + ".dict.dz", "rb") as f:  # dictzip is gzip with an extra header field
        data = f.read()
    blocks, skip = set(), set()
    with open(base + ".index", "rb") as f:
        for line in f.read().decode("utf-8", "replace").split("\n"):
            parts = line.split("\t")
            if len(parts) < 3:
                continue
            key = (b64num(parts[1]), b64num(parts[2]))
            if parts[0].replace("-", "").startswith("00database"):
                skip.add(key)
            else:
                blocks.add(key)
    for off, length in sorted(blocks - skip):
        # a few stray cp1252 bytes in GCIDE: dropped (U+FFFD removed below)
        yield data[off:off + length].decode("utf-8", "replace").replace("\ufffd", "")


def reflow(block):
    return re.sub(r"\s+", " ", block).strip()


def paragraphs(text):
    """Blank-line separated paragraphs, each reflowed onto one line."""
    return [p for p in (reflow(b) for b in re.split(r"\n\s*\n", text)) if p]


# GCIDE's character markup: [a^], [=e], [ae] ... (Webster's 1913 pronunciation and letter marks)
GCIDE_CHARS = {"ae": "æ", "AE": "Æ", "oe": "œ", "OE": "Œ", "deg": "°", "eth": "ð", "thorn": "þ",
               "imac": "i", "aum": "a", "ng": "ng", "add": "", "asl": "", "root": "√", "frac12": "½",
               "frac14": "¼", "frac34": "¾", "min": "′", "sec": "″", "middot": "·", "th": "th"}


def gcide_char(m):
    s = m.group(1)
    if s in GCIDE_CHARS:
        return GCIDE_CHARS[s]
    letters = re.sub(r"[=.~`^'\"]", "", s)
    if len(letters) in (1, 2) and letters.isalpha():  # [a^], [=e], [.a], [~e], [=oo]: the plain letter(s)
        return letters
    return m.group(0)


def clean_gcide(entry):
    lines = entry.split("\n")
    out = []
    for i, line in enumerate(lines):
        s = line.strip()
        if re.fullmatch(r"\[[^\]]{1,40}\]", s) and not s.startswith("[L.") and "." not in s[1:-1].split()[0][:-1]:
            continue  # source tags: [1913 Webster], [PJC], [WordNet 1.5 +PJC], [Century Dict.]
        out.append(line)
    text = "\n".join(out)
    # headword line: "Abdomen \Ab*do"men\ ([a^]b*d[=o]"m[e^]n), n." -> "Abdomen, n."
    text = re.sub(r"\s*\\[^\\\n]*\\", "", text)
    text = re.sub(r"\s*\((?=[^()\n]*[*\"`])[^()\n]*\)", "", text, count=1)
    text = re.sub(r"\[([A-Za-z=.~`^'\"0-9]{1,7})\]", gcide_char, text)
    text = re.sub(r"</?[a-z]+>", "", text)  # a few leftover tags
    # source tags inside a line: [1913 Webster], [Webster 1913 Suppl.], [PJC], [WordNet 1.5]
    text = re.sub(r"[ \t]*\[[^\]\n]*(?:Webster|PJC|WordNet|Century|Chambers)[^\]\n]*\]", "", text)
    return paragraphs(text.replace("{", "").replace("}", ""))


WN_SENSE = re.compile(r"^\s*(?:(?:n|v|adj|adv)\s+)?\d+:\s", re.M)


def clean_wn(entry):
    head, _, body = entry.partition("\n")
    body = re.sub(r"\[(?:syn|ant|also|see|pertainym|derivation|domain|member|part|category):[^\]]*\]", "", body)
    senses = [reflow(s) for s in WN_SENSE.split(body)]
    senses = [s.replace("{", "").replace("}", "") for s in senses if s]
    return [reflow(head)] + senses


def clean_foldoc(entry):
    paras = paragraphs(entry)
    out = []
    for p in paras:
        if re.fullmatch(r"\(\d{4}-\d{2}-\d{2}\)", p):
            continue  # the entry's date stamp
        p = re.sub(r"^<[^>]*>\s*", "", p)  # "<programming> " category tag
        p = re.sub(r"\s*\[\{?Jargon File\}?\]", "", p)  # source tag
        if not p:
            continue
        out.append(p.replace("{", "").replace("}", ""))
    return out


def clean_plain(entry):
    return [p.replace("{", "").replace("}", "") for p in paragraphs(entry)]


CLEANERS = {"gcide": clean_gcide, "wn": clean_wn, "foldoc": clean_foldoc}


BLOCK_TAGS = r"p|div|h[1-6]|li|dt|dd|tr|td|th|br|table|ul|ol|dl|blockquote|title|section|header|footer|nav"


def html_pages(root, pkg, pattern):
    files = sorted(glob.glob(os.path.join(root, pkg, pattern.lstrip("/"))))
    if not files:
        sys.exit(f"corpus_text: no file matches {pattern} in {pkg}")
    for f in files:
        with open(f, "rb") as fh:
            s = fh.read().decode("utf-8", "replace").replace("\ufffd", "")
        s = re.sub(r"(?is)<(pre|script|style|head)\b.*?</\1\s*>", "\n\n", s)
        s = re.sub(r"(?is)<!--.*?-->", "", s)
        s = re.sub(rf"(?i)</?(?:{BLOCK_TAGS})\b[^>]*>", "\n\n", s)
        s = html.unescape(re.sub(r"<[^>]*>", "", s)).replace("\xa0", " ")
        yield paragraphs(s)


def kjv_chapters(root):
    bible = os.path.join(root, "bible-kjv", "usr", "bin", "bible")
    data = os.path.join(root, "bible-kjv-text", "usr", "lib")
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["LC_ALL"] = "C"
    out = subprocess.run([bible, "-p", data, "-f", "Gen1:1-Rev22:21"], stdin=subprocess.DEVNULL,
                         capture_output=True, env=env, check=True).stdout.decode("utf-8")
    chapters, prev = [], None
    for line in out.split("\n"):
        if not line.strip():
            continue
        m = re.match(r"^([1-3]?[A-Za-z]+[0-9]+):[0-9]+ (.*)$", line)
        if not m:
            sys.exit(f"corpus_text: unexpected line from bible: {line!r}")
        if m.group(1) != prev:
            chapters.append([])
            prev = m.group(1)
        chapters[-1].append(m.group(2).rstrip())
    if len(chapters) != 1189 or sum(map(len, chapters)) != 31102:
        sys.exit(f"corpus_text: expected 1189 chapters and 31102 verses, got {len(chapters)} and {sum(map(len, chapters))}")
    return chapters


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True, help="the directory the packages were extracted into")
    ap.add_argument("--out", required=True)
    ap.add_argument("sources", nargs="+")
    a = ap.parse_args()
    seen = set()
    index = 0
    summary = {"sources": [], "val_every": VAL_EVERY, "dedup_min_chars": DEDUP_MIN_CHARS}
    tmp = {s: os.path.join(a.out, f".{s}.txt.tmp") for s in ("train", "val")}
    files = {s: open(p, "w", encoding="utf-8", newline="\n") for s, p in tmp.items()}
    started = {"train": False, "val": False}
    counts = {"train": [0, 0], "val": [0, 0]}  # documents, bytes
    for source in a.sources:
        if source == "kjv":
            docs = kjv_chapters(a.root)
        elif source.startswith("html:"):
            _, pkg, pattern = source.split(":", 2)
            docs = html_pages(a.root, pkg, pattern)
        elif source.startswith("dict:"):
            name = source[5:]
            clean = CLEANERS.get(name, clean_plain)
            docs = (clean(e) for e in dict_entries(a.root, name))
        else:
            sys.exit(f"corpus_text: unknown source {source}")
        n_docs = n_bytes = n_dropped_paras = 0
        for paras in docs:
            kept = []
            for p in paras:
                if len(p) >= DEDUP_MIN_CHARS:
                    if p in seen:
                        n_dropped_paras += 1
                        continue
                    seen.add(p)
                kept.append(p)
            if not any(len(p) >= DEDUP_MIN_CHARS for p in kept):
                continue  # nothing but a headword left
            split = "val" if index % VAL_EVERY == VAL_EVERY - 1 else "train"
            index += 1
            text = ("\n" if started[split] else "") + "\n".join(kept) + "\n"
            started[split] = True
            files[split].write(text)
            b = len(text.encode("utf-8"))
            counts[split][0] += 1
            counts[split][1] += b
            n_docs += 1
            n_bytes += b
        summary["sources"].append({"source": source, "documents": n_docs, "bytes": n_bytes,
                                   "duplicate_paragraphs_dropped": n_dropped_paras})
    for s, f in files.items():
        f.flush()
        os.fsync(f.fileno())
        f.close()
        os.replace(tmp[s], os.path.join(a.out, f"{s}.txt"))
    summary["train"] = {"documents": counts["train"][0], "bytes": counts["train"][1]}
    summary["val"] = {"documents": counts["val"][0], "bytes": counts["val"][1]}
    json.dump(summary, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()

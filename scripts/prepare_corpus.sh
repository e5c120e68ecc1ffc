#!/usr/bin/env bash
# Builds the larger corpus (docs/data.md, "A larger corpus"): ~51.5 MB of free English text from
# Debian packages, a byte-level BPE tokenizer trained on it and its token shards.
#
#   scripts/prepare_corpus.sh [--out DIR] [--cache DIR] [--small] [--vocab-size N] [--bin LOOPLM]
#
#   --out DIR         output directory (default data/corpus)
#   --cache DIR       where the downloaded .debs are kept (default OUT/debs); a .deb already there
#                     is used as is, so a cache pins the package versions
#   --small           a ~6 MB corpus from five small packages (the KJV's two, Devil's Dictionary,
#                     Jargon File, maint-guide), for tests
#   --vocab-size N    BPE vocabulary (default 8192)
#   --bin LOOPLM      the looplm binary (default build/looplm)
#
# Writes OUT/train.txt, OUT/val.txt, OUT/tokenizer.json, OUT/train.bin, OUT/val.bin and, last,
# OUT/corpus.json (the manifest: packages with versions and .deb SHA-256, the recipe, sizes,
# token counts and the SHA-256 of every output). A rerun whose manifest matches the options, the
# extraction code (corpus_text.py's hash is part of the recipe) and the files on disk does nothing. Needs apt-get (download only: no root, nothing installed),
# dpkg-deb, python3 and looplm. The text: scripts/corpus_text.py.
set -euo pipefail
export LC_ALL=C

OUT=data/corpus
CACHE=
SMALL=0
VOCAB=8192
BIN=build/looplm
usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --cache) CACHE="$2"; shift 2 ;;
    --small) SMALL=1; shift ;;
    --vocab-size) VOCAB="$2"; shift 2 ;;
    --bin) BIN="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "prepare_corpus: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done
[[ "$VOCAB" =~ ^[0-9]+$ && "$VOCAB" -ge 257 ]] || { echo "prepare_corpus: --vocab-size must be a number >= 257" >&2; exit 2; }
CACHE="${CACHE:-$OUT/debs}"
HERE="$(cd "$(dirname "$0")" && pwd)"
die() { echo "prepare_corpus: $*" >&2; exit 1; }

# Sources, in this fixed order (the split numbers documents over all of them in this order).
if [[ $SMALL == 1 ]]; then
  PACKAGES=(bible-kjv bible-kjv-text dict-devil dict-jargon maint-guide)
  SOURCES=(kjv dict:devil dict:jargon 'html:maint-guide:usr/share/doc/maint-guide/html/*.en.html')
else
  PACKAGES=(bible-kjv bible-kjv-text debian-handbook debian-policy debian-reference-en developers-reference
            dict-devil dict-foldoc dict-gcide dict-jargon dict-wn maint-guide)
  SOURCES=(kjv
           'html:debian-handbook:usr/share/doc/debian-handbook/html/en-US/*.html'
           'html:debian-policy:usr/share/doc/debian-policy/*.html/*.html'
           'html:debian-reference-en:usr/share/debian-reference/*.en.html'
           'html:developers-reference:usr/share/developers-reference/*.html'
           dict:devil dict:foldoc dict:gcide dict:jargon dict:wn
           'html:maint-guide:usr/share/doc/maint-guide/html/*.en.html')
fi
RECIPE="prepare_corpus v1; corpus_text.py sha256 $(sha256sum < "$HERE/corpus_text.py" | cut -c1-16); sources: ${SOURCES[*]}; every 100th document -> val; bpe vocab $VOCAB on all of train.txt"
MANIFEST="$OUT/corpus.json"
OUTPUTS=(train.txt val.txt tokenizer.json train.bin val.bin)

sha() { sha256sum < "$1" | cut -d' ' -f1; }

# Up to date: the manifest names this recipe and every output's SHA-256 still matches.
if [[ -f "$MANIFEST" ]] && python3 - "$MANIFEST" "$RECIPE" "$OUT" <<'EOF'
import hashlib, json, os, sys
m = json.load(open(sys.argv[1]))
if m.get("recipe") != sys.argv[2]:
    sys.exit(1)
for name, want in m["sha256"].items():
    p = os.path.join(sys.argv[3], name)
    if not os.path.isfile(p):
        sys.exit(1)
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    if h.hexdigest() != want:
        sys.exit(1)
EOF
then
  echo "prepare_corpus: $OUT is up to date ($MANIFEST matches; delete it to rebuild)"
  python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print(json.dumps(m["summary"], indent=2))' "$MANIFEST"
  exit 0
fi

for tool in apt-get dpkg-deb python3 sha256sum; do
  command -v "$tool" > /dev/null 2>&1 || die "$tool is missing (Debian: apt-get install ${tool/apt-get/apt})"
done
[[ -x "$BIN" ]] || die "the looplm binary $BIN is missing: build it (cmake --build build) or pass --bin"

mkdir -p "$OUT" "$CACHE"
rm -f "$MANIFEST"
WORK="$(mktemp -d)"  # under $TMPDIR, else /tmp
trap 'rm -rf "$WORK"' EXIT

# 1. Download (a .deb already in the cache is used as is) and unpack each package.
for p in "${PACKAGES[@]}"; do
  deb=$(ls "$CACHE/${p}"_*.deb 2> /dev/null | sort | tail -n 1 || true)
  if [[ -z "$deb" ]]; then
    echo "prepare_corpus: downloading $p"
    if ! (cd "$CACHE" && apt-get download "$p" > "$WORK/apt.log" 2>&1); then
      cat "$WORK/apt.log" >&2
      die "apt-get download $p failed (no network, or no package lists: run 'apt-get update' as root first)"
    fi
    deb=$(ls "$CACHE/${p}"_*.deb 2> /dev/null | sort | tail -n 1 || true)
    [[ -n "$deb" ]] || die "apt-get download $p left no ${p}_*.deb in $CACHE"
  fi
  mkdir -p "$WORK/pkg/$p"
  dpkg-deb -x "$deb" "$WORK/pkg/$p" || die "dpkg-deb -x $deb failed (a broken download? delete it from $CACHE)"
  printf '%s\t%s\t%s\t%s\n' "$p" "$(dpkg-deb -f "$deb" Version)" "$(basename "$deb")" "$(sha "$deb")" >> "$WORK/packages.tsv"
done

# 2. Text: train.txt and val.txt (written under temporary names, then renamed).
echo "prepare_corpus: extracting the text"
python3 "$HERE/corpus_text.py" --root "$WORK/pkg" --out "$OUT" "${SOURCES[@]}" > "$WORK/text.json"

# 3. Tokenizer and shards, timed.
echo "prepare_corpus: training a BPE tokenizer (vocab $VOCAB) on $OUT/train.txt and encoding train and val"
TIME=()
[[ -x /usr/bin/time ]] && TIME=(/usr/bin/time -v -o "$WORK/time.txt")
"${TIME[@]}" "$BIN" data --tokenizer-train bpe --vocab-size "$VOCAB" --input "$OUT/train.txt" --val "$OUT/val.txt" \
  --out "$OUT" | tee "$WORK/data.log" || die "looplm data failed"

# 4. The manifest, last.
python3 - "$WORK" "$OUT" "$RECIPE" "$VOCAB" "$SMALL" <<'EOF'
import hashlib, json, os, re, sys
work, out, recipe, vocab, small = sys.argv[1:]
def sha(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
def tokens(p):  # llm.c shard: header of 256 int32, count at [2]
    with open(p, "rb") as f:
        return int.from_bytes(f.read(12)[8:12], "little")
text = json.load(open(os.path.join(work, "text.json")))
pk = [dict(zip(("package", "version", "deb", "deb_sha256"), l.rstrip("\n").split("\t")))
      for l in open(os.path.join(work, "packages.tsv"))]
summary = {"train_bytes": text["train"]["bytes"], "val_bytes": text["val"]["bytes"],
           "train_documents": text["train"]["documents"], "val_documents": text["val"]["documents"],
           "train_tokens": tokens(os.path.join(out, "train.bin")), "val_tokens": tokens(os.path.join(out, "val.bin"))}
summary["train_bytes_per_token"] = round(summary["train_bytes"] / summary["train_tokens"], 3)
summary["val_bytes_per_token"] = round(summary["val_bytes"] / summary["val_tokens"], 3)
tm = {}
tp = os.path.join(work, "time.txt")
if os.path.exists(tp):
    t = open(tp).read()
    m = re.search(r"Elapsed \(wall clock\) time.*: (\S+)", t)
    r = re.search(r"Maximum resident set size \(kbytes\): (\d+)", t)
    if m: tm["wall"] = m.group(1)
    if r: tm["max_rss_mb"] = round(int(r.group(1)) / 1024, 1)
m = {"format": "looplm-corpus", "version": 1, "recipe": recipe, "small": small == "1", "vocab_size": int(vocab),
     "split": "documents numbered in source order; document i -> val.txt when i % 100 == 99",
     "packages": pk, "sources": text["sources"], "summary": summary, "looplm_data_time": tm,
     "sha256": {n: sha(os.path.join(out, n)) for n in ("train.txt", "val.txt", "tokenizer.json", "train.bin", "val.bin")}}
tmp = os.path.join(out, ".corpus.json.tmp")
with open(tmp, "w") as f:
    json.dump(m, f, indent=2)
    f.write("\n")
    f.flush()
    os.fsync(f.fileno())
os.replace(tmp, os.path.join(out, "corpus.json"))
print(json.dumps(summary, indent=2))
if tm: print("looplm data:", tm)
EOF
echo "prepare_corpus: done; manifest $MANIFEST"

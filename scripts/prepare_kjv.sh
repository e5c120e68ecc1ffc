#!/usr/bin/env bash
# Builds looplm's default corpus (docs/data.md): the King James Bible from Debian's
# bible-kjv package, split by chapter into OUT_DIR/train.txt and OUT_DIR/val.txt.
#
#   scripts/prepare_kjv.sh [OUT_DIR]        (default data/kjv)
#
# * Source: `bible -f Gen1:1-Rev22:21`, one line per verse: "Ge1:1 In the beginning ...".
# * Chapters are numbered 0..1188 in canonical order over the whole Bible; chapter i goes to
#   val.txt when i % 10 == 9 (every 10th chapter, 118 chapters), otherwise to train.txt (1071).
#   Starting at 9 rather than 0 keeps Genesis 1 in train and spreads val evenly over every book.
# * Text: the reference prefix ("Ge1:1 ") is dropped and trailing whitespace stripped; otherwise
#   verbatim. One verse per line, a blank line between chapters, a final newline.
# * Idempotent: if both files exist and OUT_DIR/kjv.stamp matches this recipe and their SHA-256,
#   nothing is done (delete the stamp to force a rebuild). Files are written to temporary names in
#   OUT_DIR, fsynced, then renamed; the stamp is written last.
set -euo pipefail

OUT_DIR="${1:-data/kjv}"
RECIPE="prepare_kjv v1: bible -f Gen1:1-Rev22:21; chapter % 10 == 9 -> val; verse text per line, blank line between chapters"
TRAIN="$OUT_DIR/train.txt"
VAL="$OUT_DIR/val.txt"
STAMP="$OUT_DIR/kjv.stamp"
export LC_ALL=C

die() { echo "prepare_kjv: $*" >&2; exit 1; }

stamp_for() {  # the stamp describing the current train/val files
  echo "recipe: $RECIPE"
  echo "train.txt sha256 $(sha256sum < "$TRAIN" | cut -d' ' -f1)"
  echo "val.txt sha256 $(sha256sum < "$VAL" | cut -d' ' -f1)"
}

report() {
  for f in "$TRAIN" "$VAL"; do
    printf '%-28s %9d bytes %6d lines\n' "$f" "$(wc -c < "$f")" "$(wc -l < "$f")"
  done
}

if [[ -f "$TRAIN" && -f "$VAL" && -f "$STAMP" ]] &&
   [[ "$(stamp_for)" == "$(grep -v '^source: ' "$STAMP")" ]]; then
  echo "prepare_kjv: $OUT_DIR is up to date (stamp matches)"
  report
  exit 0
fi

command -v bible > /dev/null 2>&1 ||
  die "the 'bible' command is missing; install it with: sudo apt-get install bible-kjv"

mkdir -p "$OUT_DIR"
rm -f "$STAMP"
TMP_TRAIN="$OUT_DIR/.train.txt.tmp.$$"
TMP_VAL="$OUT_DIR/.val.txt.tmp.$$"
TMP_STAMP="$OUT_DIR/.kjv.stamp.tmp.$$"
trap 'rm -f "$TMP_TRAIN" "$TMP_VAL" "$TMP_STAMP"' EXIT

# The awk program checks the shape of every line, so a changed `bible` output format fails loudly
# instead of producing a silently different corpus.
env -u COLUMNS bible -f Gen1:1-Rev22:21 < /dev/null |
  awk -v train="$TMP_TRAIN" -v val="$TMP_VAL" '
    {
      if ($0 !~ /^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ /) {
        printf "prepare_kjv: unexpected line %d from bible: %s\n", NR, $0 > "/dev/stderr"; bad = 1; exit 1
      }
      ref = $0; sub(/ .*/, "", ref)                 # "Ge1:1"
      chapter = ref; sub(/:.*/, "", chapter)        # "Ge1"
      text = $0; sub(/^[^ ]+ /, "", text); sub(/[ \t\r]+$/, "", text)
      if (chapter != prev) {
        idx++; prev = chapter
        out = (idx - 1) % 10 == 9 ? val : train
        if (started[out]) print "" > out
        started[out] = 1
        if (out == val) nval++; else ntrain++
      }
      print text > out
      verses++
    }
    END {
      if (bad) exit 1
      if (idx != 1189 || verses != 31102) {
        printf "prepare_kjv: expected 1189 chapters and 31102 verses, got %d and %d\n", idx, verses > "/dev/stderr"
        exit 1
      }
      printf "prepare_kjv: %d chapters, %d verses: %d train chapters, %d val chapters\n", idx, verses, ntrain, nval
    }' || die "building the corpus failed (is the bible-kjv-text data installed?)"

sync -- "$TMP_TRAIN" "$TMP_VAL"
mv -f -- "$TMP_TRAIN" "$TRAIN"
mv -f -- "$TMP_VAL" "$VAL"
{
  stamp_for
  echo "source: bible-kjv-text $(dpkg-query -W -f='${Version}' bible-kjv-text 2>/dev/null || echo unknown)"
} > "$TMP_STAMP"
sync -- "$TMP_STAMP"
mv -f -- "$TMP_STAMP" "$STAMP"
sync -- "$OUT_DIR" 2>/dev/null || true
report

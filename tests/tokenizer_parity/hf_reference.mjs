// The reference side of the tokenizer parity test and benchmark: Hugging Face's tokenizers.js
// (@huggingface/tokenizers, installed by setup.sh) encodes and decodes texts with a
// tokenizer.json, and prints a JSON array on stdout, one object per --input:
//   {"bytes": N, "ids": [...], "ids_special": [...], "decoded": "...", "encode_seconds": S, "runs": R}
// ids: encode(text) without special tokens; ids_special (with --special): with the special tokens
// its post-processor adds; decoded: decode(ids) with clean_up_tokenization_spaces off, i.e. the
// tokenizer.json's decoder alone, which is what the Rust library's decode does. encode_seconds
// (with --runs R): the fastest of R timed encodes after one untimed one, for bench/tokenizer.py.
//
// usage: node hf_reference.mjs --cache DIR --tokenizer FILE --input FILE [--input FILE ...]
//                              [--special] [--runs R] [--no-ids]
import { readFileSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const args = { input: [] };
for (let i = 2; i < process.argv.length; ++i) {
  const a = process.argv[i];
  if (a === "--no-ids") args.noIds = true;
  else if (a === "--special") args.special = true;
  else if (a === "--input") args.input.push(process.argv[++i]);
  else args[a.replace(/^--/, "")] = process.argv[++i];
}
if (!args.cache || !args.tokenizer || args.input.length === 0) {
  console.error("usage: node hf_reference.mjs --cache DIR --tokenizer FILE --input FILE [...] [--special] [--runs R] [--no-ids]");
  process.exit(2);
}
const lib = path.join(args.cache, "node_modules/@huggingface/tokenizers/dist/tokenizers.mjs");
const { Tokenizer } = await import(pathToFileURL(lib).href);
const tk = new Tokenizer(JSON.parse(readFileSync(args.tokenizer, "utf8")), {});
const runs = Number(args.runs ?? 0);

const results = [];
for (const file of args.input) {
  const text = readFileSync(file, "utf8");
  const ids = tk.encode(text, { add_special_tokens: false }).ids;
  let best = Infinity;
  for (let r = 0; r < runs; ++r) {
    const t0 = process.hrtime.bigint();
    tk.encode(text, { add_special_tokens: false });
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  const out = { bytes: Buffer.byteLength(text, "utf8"), runs, encode_seconds: runs ? best : null };
  if (!args.noIds) {
    out.ids = ids;
    if (args.special) out.ids_special = tk.encode(text, { add_special_tokens: true }).ids;
    out.decoded = ids.length ? tk.decode(ids, { clean_up_tokenization_spaces: false }) : "";
  }
  results.push(out);
}
process.stdout.write(JSON.stringify(results));

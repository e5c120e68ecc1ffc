// What a front end (the CLI, the server, a program of yours) needs around the model: the library's
// tables of choices, the rules its messages follow, and its file readers. Public so that every
// front end offers the same choices and says things the same way (a new weight format appears in
// every --weights list without anyone editing one).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace looplm {

// ---------------------------------------------------------------- the library's tables
std::vector<std::string> available_weight_formats();  // LoadOptions::weights: fp32, bf16, q8_0, q4_0, q4_k
std::vector<std::string> available_quantized_formats();  // the quantized ones (quantize's --format): q8_0, q4_0, q4_k
std::vector<std::string> available_gguf_types();      // ExportOptions::type (GGUF weight types): f32, f16, q8_0, q4_0
std::vector<std::string> available_kv_caches();       // GenerateOptions::kv_cache: fp32, bf16, int8
std::vector<std::string> available_exit_rules();      // ExitRule by name: fixed, kl, latent, entropy, gate
std::vector<std::string> available_kv_policies();     // KvPolicy by name: per_step, mean, last, first
std::vector<std::string> chat_template_names();       // the built-in chat templates (--chat-template NAME)
std::string joined(const std::vector<std::string>& names, const char* sep = ", ");

// ---------------------------------------------------------------- messages
// How the library's messages name what a front end passes, so that an error says what to type:
// the CLI's flags unless a front end says otherwise (the Python module names its keywords:
// "resume=True", "config['lr'] = 0.001"). Set once, before any call that may fail.
struct ArgumentSpelling {
  std::string resume = "--resume", overwrite = "--overwrite";  // flags
  std::string init_from = "--init-from", out = "--out", value_sep = " ";  // NAME value_sep VALUE
  // A config key given a value: set_prefix KEY set_key_end set_value_sep VALUE.
  std::string set_prefix = "--set ", set_key_end, set_value_sep = "=";
  std::string set_origin = "--set";  // what a message about a set key starts with ("--set: unknown config key ...")
};
void set_argument_spelling(const ArgumentSpelling& s);
const ArgumentSpelling& argument_spelling();
// The spelling of setting config key `key` to `value` ("--set lr=0.001"; `value` "" names the key alone: "--set lr").
std::string set_arg(const std::string& key, const std::string& value = "");

// `s` for a message: at most `max` bytes (then "..."), control bytes as '?'.
std::string brief(std::string_view s, size_t max = 60);
// A file path for a message: whole up to 240 bytes, else "..." and its last 237 (the file's name).
std::string brief_path(std::string_view path);
// The candidate nearest to `word` when it is within a few edits (at most 3, and less than half of
// `word`'s length), else "". Words over 64 bytes get no suggestion.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);
std::string format_bytes(double bytes);  // "3.2 GB", "512.0 MB", "4.0 kB"
// A token's bytes as OpenAI's logprobs spell them: the text when it is whole UTF-8, else
// "bytes:\xe4\xb8" (a byte token that is part of a character).
std::string token_label(std::string_view bytes);
// transformers' clean_up_tokenization: " ." " ?" " !" " ," lose their space, " ' " becomes "'",
// and " n't" " 'm" " 's" " 've" " 're" join the word before (what its decode does to a tokenizer
// with clean_up_tokenization_spaces; generation streams the exact text, as llama.cpp and vLLM do).
std::string clean_up_tokenization(std::string_view text);
// Whether `s` is well-formed UTF-8 (no overlongs, surrogates or code points above U+10FFFF).
bool valid_utf8(std::string_view s);
// The memory this process may use (the cgroup's limit, else physical memory): what reading a whole
// file is bounded by.
uint64_t memory_budget();
// The files mapped now ("a, b"), for a message when one of them changed under the process (SIGBUS):
// a fixed buffer, safe to read from a signal handler.
const char* mapped_files_note();

// ---------------------------------------------------------------- files
// A checkpoint named by its file or its run directory: the directory's model.safetensors, else
// `path` as given.
std::string checkpoint_file(const std::string& path);
// `bytes` as the file `path`, whole or not at all: a temporary file in the same directory, fsync,
// rename, fsync of the directory. Error with the path and strerror.
void write_file_atomic(const std::string& path, std::string_view bytes);
// Whole file as bytes (at most memory_budget()); Error with the path and strerror.
std::string read_file_bytes(const std::string& path);
// Prompts for batch generation: PATH ('-': standard input), one prompt per line (blank lines
// skipped), or JSONL (a PATH.jsonl name; `jsonl` is set from it) whose objects hold a string
// "prompt" (or "text"). UsageError when there are none or a line is malformed, naming it.
std::vector<std::string> read_prompts(const std::string& path, bool& jsonl);
// How a run names its validation data: "the last 10% of FILE (val_split)", or data_val.
std::string validation_name(const std::string& data_train, const std::string& data_val, double val_split);

}  // namespace looplm

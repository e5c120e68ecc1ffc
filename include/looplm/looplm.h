// looplm's public C++ API: train, evaluate and generate with looped transformer LMs.
// The `looplm` CLI is built on exactly these calls.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "looplm/config.h"
#include "looplm/error.h"
#include "looplm/types.h"

namespace looplm {

// ---------------------------------------------------------------- threads
// The compute pool: n > 0 threads exactly, or 0 (the default) to adapt — at most the cores this
// process may use, fewer while other processes keep them busy (so a shared machine does not make
// every parallel region wait for a descheduled thread).
void set_threads(int n);

// ---------------------------------------------------------------- evaluation results
struct EvalResult {
  double loss = 0;                    // mean token loss at min(depth, R) (depth 0: at h_pre)
  std::vector<double> loss_by_depth;  // exits r = 1..depth
  // At exits r = 1..depth: next-token top-1 accuracy; for examples (data_mode = examples) the
  // fraction of examples whose every answer token is the top-1 prediction (ListOps: the label).
  std::vector<double> accuracy_by_depth;
  double accuracy = 0;                // at min(depth, R)
  // Per-step diagnostics, name -> value at loop step r = 1..depth: "state_cosine" (mean cosine of
  // successive exit states h^(r), h^(r-1)) for every rule, and the mean of each tensor a loop rule
  // or block names as a diagnostic (e.g. a gate).
  std::map<std::string, std::vector<double>> diagnostics;
  // Tokens sorted into deciles of their loss at exit 1 (decile 0: the easiest tenth): the mean
  // loss of each decile at exit 1 and at the last exit (depth >= 1; "hard tokens gain most").
  std::vector<double> difficulty_first, difficulty_last;
  int64_t tokens = 0, windows = 0;  // tokens scored (examples: answer tokens); windows evaluated
  int64_t examples = 0;              // examples evaluated (data_mode = examples; windows is then 0)
  // Early exit (EvalOptions::exit; depth >= 1): loop steps per scored token, and the fraction of
  // them that exited at each step r = 1..depth. With a rule other than fixed, `loss` and `accuracy`
  // are at each token's own exit.
  double mean_steps = 0;
  std::vector<double> exit_fraction;
  // A model with a learned exit gate (Ouro): the expected exit step under the gate's distribution
  // over steps 1..depth (p_r = λ_r Π_{j<r} (1 − λ_j), the last step taking what remains), averaged
  // over the scored tokens; 0 for a model without one.
  double gate_expected_depth = 0;
  // The same model's gate in full (docs/systems.md, Learned exit gate), token means over depth
  // 1..depth: the objective its config trains (stage I "expected_loss - beta*H (token prior)" /
  // "(batch prior)", stage II "loss improvement (k, gamma)"), the expected loss Σ_r p_r L_r, the
  // entropy H(p), the mean exit step Σ_r r p_r (= gate_expected_depth) and the mean p_r.
  struct ExitGate {
    std::string objective;
    double expected_loss = 0, entropy = 0, mean_exit_step = 0;
    std::vector<double> exit_distribution;
  };
  std::optional<ExitGate> exit_gate;
  // EvalOptions::calibrate: for each early-exit rule ("depth": every token at step r; "gate" for a
  // model with one; "kl", "entropy", "latent"), its loss-versus-loop-steps frontier over thresholds:
  // the points no other threshold beats on both (mean loop steps per token, mean loss at each
  // token's exit), fewest steps first. full_loss: every token at the depth.
  struct ExitCalibration {
    struct Point { double threshold = 0, mean_steps = 0, loss = 0; };
    struct Rule {
      std::string name;
      std::vector<Point> frontier;
    };
    int depth = 0;
    int64_t tokens = 0;
    double full_loss = 0;
    std::vector<Rule> rules;
  };
  std::optional<ExitCalibration> calibration;
  // Incremental scoring: bytes of keys and values the KV policy keeps per position (averaged over
  // the positions scored) and the bytes the cache allocated.
  double kv_bytes_per_token = 0;
  double kv_cache_bytes = 0;
};
// ---------------------------------------------------------------- training
// One optimizer step, as TrainOptions::on_step sees it (the numbers metrics.jsonl records).
struct TrainStep {
  int64_t step = 0;            // steps done, this one included (1-based)
  int64_t last = 0;            // the step this call runs to (config steps, or stop_after)
  double loss = 0, lr = 0, grad_norm = 0;
  int depth = 0;               // loop steps this step ran (the depth sampler's draw)
  double tokens_per_s = 0, tokens_seen = 0, elapsed_s = 0;
  // Set when this step validated (every eval_every steps, the last step, a stop): the validation
  // loss at R and at each exit 1..R; NaN and empty otherwise.
  double val_loss = 0;
  std::vector<double> val_loss_by_depth;
  bool validated = false;
};
struct TrainOptions {
  // Run directory: checkpoint.json, model.safetensors, checkpoints/, config.json, metrics.jsonl
  // (docs/format.md). One trainer at a time: a second one is refused (a lock, released at exit).
  std::string out_dir;
  // Continue out_dir's committed checkpoint, verified (a damaged or mismatched one is an Error,
  // nothing changed). A directory with no run starts one; one that stopped before its first
  // checkpoint starts again from its config.json; one with weights but no checkpoint is an Error.
  bool resume = false;
  // A new run whose weights start as this checkpoint's (model.safetensors or a run directory)
  // instead of the seed's: fine-tuning, or a run whose training state was lost. The config must
  // describe the same parameters (names and shapes) and tokenizer; AdamW starts afresh at step 0.
  std::string init_from;
  // out_dir already holding a run without `resume` is a UsageError unless this is set: then the
  // run's files are removed and training starts over.
  bool overwrite = false;
  int stop_after = -1;       // stop (with a checkpoint) after this step although the schedule is longer
  bool quiet = false;        // no progress lines
  std::function<void(const std::string&)> log;  // progress lines (default: stderr)
  // Set by the caller (e.g. from a signal-handling thread) to end the run after the current step,
  // with a checkpoint; --resume continues it.
  const std::atomic<bool>* stop = nullptr;
  // Called after every step (after its validation and checkpoint, when it had them), on the
  // training thread. Returning false ends the run as `stop` does: a checkpoint at this step (with a
  // validation), TrainResult::interrupted set, resume continues it.
  std::function<bool(const TrainStep&)> on_step;
  // Under mpirun (docs/training.md, "Data parallel (MPI)"): the gradient travels between ranks in
  // pieces of this many bytes (the memory each exchange needs beside the gradients).
  size_t allreduce_bucket_bytes = 4u << 20;
};
struct TrainResult {
  std::vector<double> losses;  // training loss per step run in this call
  double val_loss = 0;         // last validation loss
  int64_t steps_done = 0;      // total optimizer steps in the checkpoint
  bool interrupted = false;    // ended by TrainOptions::stop
  size_t activation_bytes_peak = 0;  // the memory plan's activation arena (bytes)
  // The run is complete (steps_done >= config.steps): `report` is the validation at its last step
  // (the first eval_batches x batch_size windows or examples, every exit), from the validation data
  // train already holds; examples: the first validation examples' prompt and answer tokens.
  bool complete = false;
  EvalResult report;
  std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> report_examples;
  std::vector<int32_t> sample_prompt;  // text data: the first tokens of the validation data
};
// With options.resume and a checkpoint in out_dir, `config` must be the run's own config
// (run_config) except for the keys that are safe to change on resume (resume_safe_keys: the
// schedule length and shape, clipping, weight decay, validation and logging); any other
// difference is a UsageError naming the key.
TrainResult train(const Config& config, const TrainOptions& options);
// out_dir has a checkpoint to resume (checkpoint.json, or an older looplm's model and train
// state), not yet verified.
bool has_checkpoint(const std::string& out_dir);
// The config a resume of out_dir continues with: its verified checkpoint's, else its
// model.safetensors' or config.json's. Error when it holds none or its checkpoint does not verify.
Config run_config(const std::string& out_dir);
const std::vector<std::string>& resume_safe_keys();
// Your own text, the same in every front end (the CLI's train, Python's looplm.train): a new run
// whose config sets data_train and not data_val validates on the last val_split of data_train
// (which it never trains on), not on the preset's corpus; data_val set alone trains on the
// preset's data_train. The config to train, and in `note` what a user should be told ("" when
// nothing). Not for a resumed run or one from --init-from: their config is their own.
Config with_own_data(Config c, bool sets_data_train, bool sets_data_val, std::string* note = nullptr);
// Holds run directory `dir` (created if missing) for this process, as train() does while it runs:
// another process that tries is refused with an Error naming the holder's pid, until the holder
// ends, however it ends. Holds within one process nest (a caller may hold the directory while it
// reads the run's config, then call train()).
class RunLock {
 public:
  explicit RunLock(const std::string& dir);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  struct Held;
  std::shared_ptr<Held> held_;
};

// ---------------------------------------------------------------- a loaded model
// Per-token early exit (docs/cli.md, eval): a token stops at the first loop step whose criterion is
// below `threshold`, at the latest at the run's depth. kl: KL(p_r ‖ p_{r−1}) between the next-token
// distributions of successive exits (from step 2); latent: ‖h_r − h_{r−1}‖ / ‖h_r‖ (from step 2);
// entropy: of p_r (from step 1); fixed: every token runs the depth.
// gate: the model's learned exit gate (Ouro; a checkpoint with loop.exit_gate): a token exits at the
// first step whose cumulative exit probability Σ_{s≤r} λ_s Π_{j<s} (1 − λ_j) reaches the threshold q.
enum class ExitRule { fixed, kl, latent, entropy, gate };
struct EarlyExit {
  ExitRule rule = ExitRule::fixed;
  double threshold = 0;
};
ExitRule parse_exit_rule(const std::string& name);  // UsageError naming the choices
// The early exit a front end was asked for, checked the same in every one: the rule by name and
// its threshold (NaN: not given). UsageError, naming the options as the caller spells them
// (`--exit-rule` on the command line, `'exit_rule'` in a request), for an unknown rule, a rule
// other than fixed without a finite threshold, a threshold given with fixed (it would do nothing),
// and gate's cumulative probability outside (0, 1].
EarlyExit early_exit(const std::string& rule, double threshold, const std::string& rule_option = "exit_rule",
                     const std::string& threshold_option = "exit_threshold");
const char* exit_rule_name(ExitRule r);

// KvPolicy (what incremental decoding keeps for a token that exited early): looplm/types.h.

struct EvalOptions {
  int depth = -1;           // loop steps; -1 = trained R; 0 = h_pre
  // Per-token early exit. In evaluation every token's missing steps still run for the later
  // tokens' keys and values (the exact `per_step` KV policy), so `loss` is the loss each token
  // has at its own exit, and `mean_steps` the loop steps it needed.
  EarlyExit exit;
  // Score through incremental decoding instead of full forward passes: every token is fed one at
  // a time through the KV cache, exiting by `exit` and keeping keys/values by `kv_policy` (the
  // held-out loss of a policy). Text models only.
  bool incremental = false;
  KvPolicy kv_policy = KvPolicy::per_step;
  std::string kv_cache = "fp32";  // incremental: the cache's precision (GenerateOptions::kv_cache)
  int batch = 8;            // windows per forward pass (incremental: sequences decoded together)
  int64_t max_windows = -1; // the first windows only; -1 = all
  // Tokens per window: 0 = the model's context. A converted model's context is the length it was
  // trained to (Ouro: 32,768), where one window's attention scores alone take gigabytes: a shorter
  // window scores the same text with less memory and less context per token.
  int window = 0;
  // Called after each batch with (windows done, windows in all), e.g. to show progress.
  std::function<void(int64_t done, int64_t total)> progress;
  // Record every exit's loss and every rule's signal per token and score each rule over its
  // thresholds (EvalResult::calibration; full passes only). Memory: the tokens × depth signals and
  // one batch's previous-exit distributions (batch × window × vocabulary floats).
  bool calibrate = false;
};
// The sampling options, checked as every front end checks them (generate, DecodeSession::start,
// the CLI, the server, Python): UsageError for a temperature that is negative or not a finite
// number (NaN would pick the least likely token), a negative top_k, a top_p outside (0, 1].
void check_sampling(double temperature, int top_k, double top_p);

struct GenerateStats {
  int prompt_tokens = 0;      // tokens of the first prefill (at most a context)
  double prompt_seconds = 0;  // that prefill
  int new_tokens = 0;
  double gen_seconds = 0;     // everything after it (decoding, window restarts)
  double mean_steps = 0;      // loop steps per decoded token (to its exit)
  // Loop steps computed per decoded token: mean_steps, plus the steps the per_step KV policy runs
  // after a token's exit for the cache (so with per_step, early exit saves no loop compute).
  double computed_steps = 0;
  double kv_bytes_per_token = 0;  // what the KV policy keeps per position (EvalResult's)
  double kv_cache_bytes = 0;      // what the cache allocated
  int64_t draft_tokens = 0, accepted_tokens = 0;  // speculative decoding: drafted, and kept by the verification
  // Passes over the loop's weights after the prompt, in tokens' worth at the full depth: a pass of
  // r loop steps counts r / depth whatever rows it carries (plain decoding of one sequence: one per
  // token; a draft of r steps: r / depth; a verification of K drafts: (depth − r) / depth once).
  double weight_streams = 0;
  // speculative = -1 (auto): what ran (K drafts at draft_depth; 0: plain decoding) and why.
  int speculative = 0, draft_depth = 0;
  std::string speculative_why;
};
struct GenerateOptions {
  int max_new = 200;
  double temperature = 1.0;  // 0 = greedy
  int top_k = 0;             // 0 = off
  double top_p = 1.0;        // 1 = off
  uint64_t seed = 0;
  int depth = -1;            // loop steps; -1 = trained R; 0 = no loop step (h_pre)
  EarlyExit exit;            // per-token early exit of each decoded token (the prompt runs `depth`)
  KvPolicy kv_policy = KvPolicy::per_step;
  // Self-speculative decoding (loop-as-draft, one sequence at a time): draft `speculative` tokens
  // with the first draft_depth loop steps (their KV cache and states shared with the full model),
  // verify them with the remaining steps in one pass, keep the agreeing prefix and the first
  // correction. Greedy output is plain greedy decoding's; sampled output has plain sampling's
  // distribution (speculative sampling).
  // -1 (auto): measured on the first call (a few dozen passes; kept per model, depth, KV cache and
  // thread count): drafting where it is predicted faster than plain decoding by 5%, else plain; a
  // batch of several sequences or an exit rule decodes plainly. GenerateStats says what ran and why.
  int speculative = 0;
  int draft_depth = 0;
  // The KV cache's precision: "fp32" (exact: decoding gives the full forward's logits), "bf16"
  // (half the bytes every attention pass reads, which is what batched decoding waits on; keys and
  // values rounded to 8 bits of mantissa, logits within ~1e-2) or "int8" (a quarter, plus one fp32
  // scale per position and head: each head vector rounded to 127 steps of its largest |value|).
  std::string kv_cache = "fp32";
  // The model's end tokens (LanguageModel::special_tokens().eos_ids) end a sequence, and are not
  // part of its output, unless this is set.
  bool ignore_eos = false;
  // A sequence ends once its text (TextStream, as a continuation of the prompt) holds one of
  // these; its output ends with the token that completed it (a TextStream with the same stop
  // strings cuts the text before it).
  std::vector<std::string> stop;
  // Added to a token's logit before it is chosen (OpenAI's logit_bias: -100 bans, 100 forces).
  std::vector<std::pair<int32_t, float>> logit_bias;
  GenerateStats* stats = nullptr;  // filled in when set (batched: summed over the sequences)
};
// ---------------------------------------------------------------- token ids to text
// The text of tokens as they arrive: the one path from ids to text that generate, serve, the
// Python module and training's sample take. Each token adds its bytes; text is given out in whole
// UTF-8 characters (a character split across tokens waits for its last byte) and held back while
// it may begin a stop string. The text it gives out, all told, is decode(ids) (a Hugging Face
// decoder's U+FFFD for invalid UTF-8 included; the byte tokenizer's bytes as they are), cut before
// the first stop string; tokens after that are ignored. O(1) amortised per token for byte and char
// tokenizers and the Hugging Face decoders that act token by token (GPT-2, Llama 2 and 3, Qwen,
// Gemma, Mistral: ByteLevel, Metaspace, ByteFallback, Replace, Strip, Fuse); a decoder that reads
// tokens together decodes the whole text each token.
struct TextStreamOptions {
  std::vector<std::string> stop;  // the text ends before the first of these
  // The tokens open the text, rather than continue a prompt (a SentencePiece decoder drops the
  // space of a text's first word, not of a continuation's).
  bool at_start = false;
};
class TextStream {
 public:
  TextStream(TextStream&&) noexcept;
  TextStream& operator=(TextStream&&) noexcept;
  ~TextStream();
  std::string push(int32_t id);  // the text ready after this token (may be empty); Error for an id outside the vocabulary
  std::string finish();          // the rest (an unfinished character as decode ends it); push no more after it
  bool stopped() const;          // a stop string was found: the text ended before it
  // Bytes of text decided so far (given out, or held back only as a possible stop string's
  // start): where the next token's text begins (OpenAI's text_offset).
  size_t text_bytes() const;

  struct Impl;
  explicit TextStream(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

// What LanguageModel::apply_chat_template passes a chat template beside the messages.
struct ChatOptions {
  bool add_generation_prompt = true;
  std::string tools_json;  // a JSON list of tool schemas ("": none)
  std::string extra_json;  // a JSON object of more template variables, e.g. {"enable_thinking": false}
};

struct LoadOptions {
  // The weight format inference passes read (chosen once, here): "" (default) the checkpoint's own
  // (fp32, or a quantized checkpoint's, its packed bytes as they are); "fp32" (exact); "bf16" (a
  // rounded copy; half the memory traffic, logits within ~1e-2); "q8_0" / "q4_0" / "q4_k" (quantized at
  // load, round to nearest: `looplm quantize` writes checkpoints, also by GPTQ).
  std::string weights;
  bool allow_nonfinite = false;  // load a checkpoint whose tensors hold NaN/Inf (an error otherwise)
};

// A token's log-probability under the model (the softmax of its raw logits) and the most likely tokens'.
struct TokenLogprob {
  int32_t id = 0;
  double logprob = 0;
  std::vector<std::pair<int32_t, double>> top;  // the most likely tokens', most likely first
};

class LanguageModel {
 public:
  // model.safetensors (or its run directory), mapped read-only: no gradient or optimizer memory.
  static LanguageModel load(const std::string& checkpoint, const LoadOptions& o = {});
  // A model with freshly initialised weights (benchmarks, tests).
  static LanguageModel from_config(const Config& c, uint64_t seed, const LoadOptions& o = {});
  LanguageModel(LanguageModel&&) noexcept;
  LanguageModel& operator=(LanguageModel&&) noexcept;
  ~LanguageModel();

  const Config& config() const;
  int64_t n_params() const;
  bool has_exit_gate() const;  // a learned exit gate (Ouro's): ExitRule::gate applies
  std::vector<int32_t> encode(const std::string& text) const;
  // A prompt: a char model maps a character outside its alphabet (or a byte of invalid UTF-8) to
  // its fallback symbol (the space when it has one, else its first) instead of failing; `unseen`
  // gets each such character once ("U+00E9 'é'"). A byte model encodes every byte.
  // add_bos: the model's BOS first where its convention says so (SpecialTokens::add_bos; not
  // twice); a rendered chat template writes its own.
  std::vector<int32_t> encode_prompt(const std::string& text, std::vector<std::string>* unseen = nullptr,
                                     bool add_bos = true) const;
  std::string fallback_symbol() const;  // what an unseen character becomes, as text
  std::string decode(const std::vector<int32_t>& ids) const;
  // Whether the tokenizer can write token `id` (a padded vocabulary's rows past its tokenizer, as
  // Qwen2's 151,936 rows for 151,665 tokens, cannot: generation never picks them, and a prompt
  // holding one is a UsageError).
  bool has_text(int32_t id) const;
  // The raw bytes one token adds to a text it continues (a byte token's: part of a character;
  // a SentencePiece word's: with its space): what OpenAI's logprobs call a token.
  std::string token_piece(int32_t id) const;
  // Text as tokens arrive (TextStream): a generation's continuation of its prompt by default.
  TextStream text_stream(const TextStreamOptions& o = {}) const;
  // The model's begin- and end-of-text tokens. A converted model's own (Config::text: the ids of
  // generation_config.json and tokenizer_config.json, or the GGUF file's eos and eot); otherwise
  // a Hugging Face tokenizer's special token named like one ("<|endoftext|>", "</s>", ...); -1,
  // "" and no ids where there is none (byte and char models: their text simply goes on).
  struct SpecialTokens {
    int32_t bos = -1, eos = -1;       // eos: the first end token
    std::string bos_text, eos_text;
    std::vector<int32_t> eos_ids;     // generation ends at any of these (ignore_eos: it does not)
    bool add_bos = false;             // a prompt starts with bos (encode_prompt adds it)
  };
  const SpecialTokens& special_tokens() const;
  // The model's chat template (Jinja, from its tokenizer_config.json or GGUF file); "" for none.
  const std::string& chat_template() const;
  // Chat (docs/serve.md, "Chat"): a conversation as the prompt text the model was trained on, by
  // its chat template rendered as transformers' apply_chat_template(messages, tokenize=False)
  // renders it (docs/chat_templates.md), or, for a model without one, the built-in `chatml`.
  // `messages_json`: a JSON list of {role, content, ...}. UsageError with the template's own
  // message when it refuses the conversation (raise_exception: roles out of order, ...), and
  // naming the template when this looplm cannot render it. Thread-safe. The text's special
  // tokens are ids when it is encoded (encode_prompt(text, nullptr, false): the template wrote
  // any BOS).
  std::string apply_chat_template(const std::string& messages_json, const ChatOptions& o = {}) const;
  // Chat renders this instead of the model's own template: a built-in's NAME (chat_template_names),
  // or a FILE holding a template (Jinja text, or a tokenizer_config.json with a chat_template).
  // UsageError for neither, Error for a file whose template does not parse. Not while another
  // thread renders.
  void use_chat_template(const std::string& name_or_file);
  // What chat renders: "the model's chat template", "builtin:chatml", or the file given.
  std::string chat_template_origin() const;

  // Deterministic evaluation over consecutive non-overlapping windows of `context` tokens
  // (targets shifted by one); depth -1 = R, 0 = h_pre. Noise off. max_windows < 0: all of them.
  EvalResult evaluate(const std::vector<int32_t>& tokens, const EvalOptions& o) const;
  EvalResult evaluate(const std::vector<int32_t>& tokens, int depth = -1) const;
  // A data file (text, .jsonl, .bin), tokenized with this model's tokenizer.
  EvalResult evaluate_file(const std::string& data_path, const EvalOptions& o) const;
  EvalResult evaluate_file(const std::string& data_path, int depth = -1) const;
  // The run's own validation data: data_val, or (data_val empty) the last val_split of data_train,
  // the part training held out.
  EvalResult evaluate_validation(const EvalOptions& o) const;
  // Sampling with a KV cache per (block, loop step); on_token gets each new id as it is made.
  std::vector<int32_t> generate(const std::vector<int32_t>& prompt, const GenerateOptions& o,
                                const std::function<void(int32_t)>& on_token = {}) const;
  // Several sequences at once, each its own position and length (one batched pass per new token):
  // sequence i samples with seed o.seed + i, so it is what generate(prompts[i]) with that seed makes.
  // on_token(i, id) gets each new id.
  std::vector<std::vector<int32_t>> generate_batch(const std::vector<std::vector<int32_t>>& prompts,
                                                   const GenerateOptions& o,
                                                   const std::function<void(int, int32_t)>& on_token = {}) const;
  // The text `added` (new tokens) appends to `prompt`'s: a TextStream's text (a continuation:
  // a SentencePiece word keeps its space, a character split across tokens is whole), pushed
  // `added` whole. (`prompt` is not read: a token's piece does not depend on the text before it.)
  std::string decode_continuation(const std::vector<int32_t>& prompt, const std::vector<int32_t>& added) const;

  // Logits [T, V] of a full forward pass (no cache) over `tokens` at `depth`; for tests/tools.
  std::vector<float> forward_logits(const std::vector<int32_t>& tokens, int depth = -1) const;
  // Each token of `tokens` after the first, scored by one full pass at `depth`: its log-probability
  // given those before it and the `top` most likely tokens' (0..20), as SessionToken reports them
  // for a new token (OpenAI's logprobs of an echoed prompt). 1..context tokens.
  std::vector<TokenLogprob> prompt_logprobs(const std::vector<int32_t>& tokens, int depth = -1, int top = 0) const;
  // Every exit of one full forward pass (no cache, noise off) over 1..context tokens: the logit
  // lens across loop steps. Memory: `states` (depth + 1) · T · d floats, `logits` one T · V block
  // per asked exit.
  struct TraceOptions {
    int depth = -1;          // loop steps; -1 = trained R (may exceed it)
    bool states = true;      // keep h^(r) for r = 0..depth
    std::vector<int> exits;  // the exits whose logits to keep (0 = the head on h_pre, r = 1..depth)
  };
  struct Trace {
    int depth = 0, tokens = 0, d_model = 0, vocab = 0;
    // [depth + 1, T, d_model]: h^(0) = h_pre (after embedding and prelude), h^(r) = readout of the
    // loop state after step r (what the coda and head read at exit r).
    std::vector<float> states;
    std::vector<int> exits;      // TraceOptions::exits, in its order
    std::vector<float> logits;   // [exits.size(), T, V]
    // Per loop step r = 1..depth, as EvalResult::diagnostics over these tokens: "state_cosine"
    // (mean cosine of h^(r) and h^(r-1)) and the mean of each tensor the loop rule or a block
    // names as a diagnostic (a gate, NRGPT's energy).
    std::map<std::string, std::vector<double>> diagnostics;
    // The same per step and token, for the diagnostics with one row per token (a gate, an energy):
    // the mean over the row, averaged over the blocks that report one: name -> [depth, T].
    std::map<std::string, std::vector<float>> token_diagnostics;
  };
  Trace trace(const std::vector<int32_t>& tokens, const TraceOptions& o) const;

  struct Impl;
 private:
  friend class DecodeSession;
  explicit LanguageModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ---------------------------------------------------------------- continuous batching
// Sequences that join and leave a running batch between tokens (a server's requests): each holds a
// slot of one KV cache (the context's worth of positions) and decodes with the others in one
// batched pass per token. A sequence gets exactly the tokens generate() gives it alone with the
// same options and seed (greedy or sampled, through window restarts), whoever shares the batch.
struct SequenceOptions {
  int max_new = 200;         // tokens to make; the sequence finishes after the last
  double temperature = 1.0;  // 0 = greedy
  int top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;
  // -1: no log-probabilities; k >= 0: each token's log-probability under the model's distribution
  // (the raw logits' softmax, not the sampling's) and the k most likely tokens' (k <= 20).
  int logprobs = -1;
  std::vector<std::pair<int32_t, float>> logit_bias;  // GenerateOptions::logit_bias
};
struct SessionOptions {
  int slots = 8;  // sequences at once
  // Positions each slot's KV cache holds: 0 = the model's context. Less bounds the memory of a
  // model trained to a long context (Ouro: 32,768): a sequence then keeps its last `context`
  // tokens, and restarts its window on the last half when it is full, as generate() does at the
  // model's context (so it makes generate()'s tokens while prompt + new tokens fit).
  int context = 0;
  int depth = -1; // loop steps; -1 = trained R
  EarlyExit exit;
  KvPolicy kv_policy = KvPolicy::per_step;
  std::string kv_cache = "fp32";
};
struct SessionToken {
  int slot = 0;
  int32_t id = 0;
  // The loop steps of the pass whose logits chose this token (the first token: the prompt's last
  // position, which runs the depth; later ones: the previous token's exit).
  int steps = 0;
  bool last = false;  // the sequence's last token (its max_new-th, or ended by step's ends_here): its slot is free again
  double logprob = 0;
  std::vector<std::pair<int32_t, double>> top;  // SequenceOptions::logprobs most likely, most likely first
};
class DecodeSession {
 public:
  // The model must outlive the session. Not thread-safe: one thread drives a session.
  DecodeSession(const LanguageModel& lm, const SessionOptions& o);
  ~DecodeSession();
  DecodeSession(const DecodeSession&) = delete;
  DecodeSession& operator=(const DecodeSession&) = delete;
  // A new sequence in a free slot: its prompt (the last `context` tokens of it) runs now, and the
  // next step() gives its first token. Returns the slot, or -1 when every slot is taken.
  // UsageError for an empty prompt, an id outside the vocabulary or bad options.
  int start(const std::vector<int32_t>& prompt, const SequenceOptions& s);
  // Every running sequence one token further (one batched pass for those that go on).
  // `ends_here`, when given, is asked of each new token, in slot order, before that pass: true ends
  // its sequence there (an end token, a stop string: the caller's rules), its slot free and no pass
  // spent on it; the token is still returned, with `last` set. If it throws, every sequence this step
  // touched ends (their slots free) and the exception leaves step().
  std::vector<SessionToken> step(const std::function<bool(const SessionToken&)>& ends_here = {});
  void cancel(int slot);  // the sequence stops now and its slot is free
  int active() const;     // sequences running
  int slots() const;
  int depth() const;      // the loop steps each token runs at most
  int context() const;    // the positions a slot holds (SessionOptions::context)
  // Totals since the session began: prompt tokens run, tokens made, and the loop steps those ran;
  // the KV policy's bytes per position and the cache's allocation (GenerateStats').
  int64_t prompt_tokens() const;
  int64_t new_tokens() const;
  double mean_steps() const;
  double kv_bytes_per_token() const;
  double kv_cache_bytes() const;

 private:
  struct Impl;
  friend class LanguageModel;  // generate_batch: its stats read the decoder's counts
  std::unique_ptr<Impl> impl_;
};

// ---------------------------------------------------------------- describing a model (looplm info)
struct ParamCounts {
  int64_t total = 0, embedding = 0, prelude = 0, core = 0, coda = 0, loop = 0, other = 0;  // other: the final norm
  int64_t non_embedding() const { return total - embedding; }
};
// The dense model of the same width and block kind with n_core blocks (no prelude or coda, R = 1,
// the residual rule): the control a looped model is compared with.
struct DenseControl {
  int n_core = 0;
  ParamCounts params;
  double infer_flops_per_token = 0;
};
struct ModelDescription {
  ParamCounts params;
  int unrolled_depth = 0;  // block applications at R
  // At R, matrix products and attention at its causal average (T/2 keys per query); training =
  // 3 x inference (backward ~ 2 x forward).
  double infer_flops_per_token = 0, train_flops_per_token = 0;
  double flops_prelude = 0, flops_core_per_step = 0, flops_rule_per_step = 0, flops_coda = 0, flops_head = 0;
  double kv_cache_bytes_per_token = 0;  // fp32 keys and values per block and loop step
  // Measured: one training forward and backward at batch 1, one context, depth R, full backprop
  // (-1: not measured).
  double activation_bytes_per_token = -1, activation_grad_bytes_per_token = -1;
  bool looped = false;           // R > 1, a prelude or coda, or a loop rule other than residual
  DenseControl iso_flop, iso_param;  // looped only: the dense depth nearest in FLOPs / in non-embedding parameters
};
// What `config` builds. UsageError for a config that does not validate or a tokenizer it cannot
// serve (a char alphabet still to be built from the data is accepted).
ModelDescription describe_model(const Config& config, bool measure_activations = true);

// A checkpoint's config and weight format (its tensors are checked; the file is mapped, not copied).
struct CheckpointSummary {
  std::string file;         // the model.safetensors read (a run directory's)
  Config config;
  std::string weights = "fp32";  // a quantized checkpoint's format
  size_t packed_matrices = 0;    // its packed weight matrices (the rest fp32)
  uint64_t packed_bytes = 0, file_bytes = 0;
};
CheckpointSummary inspect_checkpoint(const std::string& checkpoint);

// ---------------------------------------------------------------- tokenizers (docs/data.md)
// A tokenizer on its own (without a model): a Hugging Face tokenizer.json, or the one a checkpoint
// carries (byte, char or Hugging Face). Thread-safe: encode and decode may run on several threads.
class TextTokenizer {
 public:
  // A tokenizer.json, or a checkpoint (a run directory or a .safetensors file). Error naming the
  // file when it is missing, not a tokenizer, or a tokenizer looplm does not compute.
  static TextTokenizer open(const std::string& path);
  // The byte tokenizer (256 ids); a char tokenizer of `alphabet` (UTF-8, id = a code point's
  // position) or of the distinct code points of `text`, sorted; a tokenizer.json's text (`origin`
  // names it in messages). Error naming what is wrong (a repeated code point, not UTF-8, ...).
  static TextTokenizer byte_level();
  static TextTokenizer char_level(const std::string& alphabet);
  static TextTokenizer char_level_from_text(const std::string& text);
  static TextTokenizer from_json(const std::string& json_text, const std::string& origin);
  TextTokenizer(TextTokenizer&&) noexcept;
  TextTokenizer& operator=(TextTokenizer&&) noexcept;
  ~TextTokenizer();
  std::string kind() const;  // byte | char | hf
  int vocab_size() const;
  // add_special: the post-processor's special tokens too (e.g. <s> first); UsageError for a byte or
  // char tokenizer, which has none.
  std::vector<int32_t> encode(const std::string& text, bool add_special = false) const;
  std::string decode(const std::vector<int32_t>& ids) const;  // Error naming an id outside the vocabulary
  // Whether transformers' decode tidies this tokenizer's text (tokenizer_config.json's
  // clean_up_tokenization_spaces: the one beside a tokenizer.json, or a converted checkpoint's);
  // decode_as_transformers applies it (clean_up_tokenization), decode never does.
  bool clean_up_tokenization_spaces() const;
  std::string decode_as_transformers(const std::vector<int32_t>& ids) const;
  TextStream text_stream(const TextStreamOptions& o = {}) const;  // the tokenizer must outlive it

  struct Impl;  // the library's tokenizer (src/tokenizer/tokenizer.h)
  const Impl& impl() const { return *impl_; }

 private:
  explicit TextTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ---------------------------------------------------------------- quantization (docs/cli.md, quantize)
struct QuantizeOptions {
  std::string format;          // q8_0 | q4_0 | q4_k
  std::string method = "rtn";  // rtn: round to nearest on each block's own grid; gptq: GPTQ on calibration text
  std::string calib;           // gptq: calibration text ("" = the checkpoint's data_train)
  int64_t calib_tokens = 16384;  // gptq: calibration tokens, in whole context windows
  bool calib_first_step_only = false;  // gptq: a shared core block's inputs from its first loop step only (else every step)
  bool allow_nonfinite = false;
};
struct QuantizeResult {
  std::string format, method, calib;
  int matrices = 0;            // weight matrices quantized (the rest stays fp32)
  uint64_t in_bytes = 0, out_bytes = 0;
  // gptq: calibration tokens run and the layer-output error summed over the matrices,
  // Σ tr((W − Ŵ) H (W − Ŵ)ᵀ) / tr(W H Wᵀ), of round-to-nearest and of GPTQ
  int64_t calib_tokens = 0;
  double rtn_error = 0, gptq_error = 0;
};
// A fp32 checkpoint (model.safetensors or its run directory) quantized into the checkpoint file
// `out` (written atomically), which eval, generate, serve and info read directly. UsageError for an
// unknown format or method, an `out` that is a directory or the input itself, an input that is
// quantized already.
QuantizeResult quantize_checkpoint(const std::string& checkpoint, const std::string& out, const QuantizeOptions& o);

// ---------------------------------------------------------------- interchange (docs/interchange.md)
struct ConvertResult {
  std::string format;               // "gguf" or "huggingface"
  std::string arch;                 // the source's architecture (GGUF arch, or architectures[0])
  std::string weights;              // the checkpoint's format: fp32, q8_0, q4_0
  int tensors = 0, files = 1;       // tensors read, in how many files
  Config config;                    // the converted model's
  std::vector<std::string> notes;   // what a user should know (Huginn's zero state, ...)
};
// A GGUF file (arch llama or nanbeige) or a Hugging Face model directory (Llama, Mistral, Qwen2,
// Nanbeige4.2, Ouro, Huginn-0125) into a new run directory `out_dir` (model.safetensors and
// convert.json), which appears whole or not at all (written under a temporary name, renamed).
// UsageError for an existing out_dir, an architecture or config key looplm does not compute;
// Error naming the file for a missing shard or tensor, a wrong shape, a truncated file.
ConvertResult convert_model(const std::string& from, const std::string& out_dir);

struct ExportOptions {
  std::string format = "gguf";  // the only one
  std::string type;             // f32 | f16 | q8_0 | q4_0; "" = the checkpoint's own (fp32 -> f32)
  std::string name = "looplm";  // general.name
};
struct ExportResult {
  std::string arch, type;       // GGUF arch: llama (dense) or nanbeige (looped)
  int tensors = 0;
  uint64_t bytes = 0;
  bool exact_codes = false;     // a q8_0 / q4_0 checkpoint's codes copied, not quantized again
  Config config;
  std::vector<std::string> notes;  // what a user should know (a normalizer llama.cpp does not run, ...)
};
// A checkpoint (model.safetensors or its run directory) as llama.cpp's GGUF at `out_file`, written
// atomically. UsageError for a layout no llama.cpp architecture computes, saying why.
ExportResult export_model(const std::string& checkpoint, const std::string& out_file, const ExportOptions& o = {});

}  // namespace looplm

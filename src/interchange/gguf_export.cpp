// looplm → GGUF (docs/interchange.md): the `llama` and `nanbeige` architectures.
#include <cstring>
#include <map>

#include "backend/cpu/quant.h"
#include "core/choices.h"
#include "tokenizer/tokenizer.h"
#include "interchange/gguf_layout.h"
#include "interchange/gguf_model.h"
#include "interchange/gguf_vocab.h"
#include "io/gguf.h"
#include "looplm/error.h"
#include "looplm/util.h"

namespace looplm {

const char* const kGgufWayOut =
    "Models that export are stacks of Llama blocks: train one with --preset llama (dense), or --preset llama --set R=3 "
    "(its blocks looped: llama.cpp's nanbeige)";

std::string gguf_export_refusal(const Config& c, bool check_tokenizer) {
  const std::string why = ": no llama.cpp architecture computes it (GGUF export takes a stack of Llama blocks, dense or looped)";
  if (c.n_prelude || c.n_coda)
    return "the model has a prelude or coda (n_prelude " + std::to_string(c.n_prelude) + ", n_coda " + std::to_string(c.n_coda) + ")" + why;
  if (c.R > 1 && c.loop_rule != "residual") return "loop_rule '" + c.loop_rule + "' (llama.cpp's nanbeige loops with the residual rule)" + why;
  if (c.block != "pre_norm") return "block '" + c.block + "' (the Llama block is pre_norm)" + why;
  if (c.norm != "rmsnorm") return "norm '" + c.norm + "' (the Llama block uses rmsnorm)" + why;
  if (c.mlp != "swiglu") return "mlp '" + c.mlp + "' (the Llama block uses swiglu)" + why;
  if (c.pos != "rope") return "pos '" + c.pos + "' (the Llama block uses rope)" + why;
  if (c.bias) return "bias true (llama.cpp's llama and nanbeige have no biases)" + why;
  if (c.deeploop_p != 0) return "deeploop_p " + std::to_string(c.deeploop_p) + " (residual scaling)" + why;
  if (c.emb_scale != 1) return "emb_scale " + std::to_string(c.emb_scale) + " (a scaled embedding)" + why;
  if (c.exit_gate) return "a learned exit gate (exit_gate)" + why;
  if (c.head_dim() % 2) return "an odd head dimension (" + std::to_string(c.head_dim()) + ") cannot be rotated by RoPE pairs";
  if (c.d_model % 32 || c.ff_dim() % 32 || c.q_width() % 32)
    return "d_model " + std::to_string(c.d_model) + ", d_ff " + std::to_string(c.ff_dim()) + " and n_heads · d_head " +
           std::to_string(c.q_width()) + " must be multiples of 32 (GGUF's quantized blocks)";
  if (c.tokenizer == "char") return "tokenizer 'char': a char alphabet has no llama.cpp tokenizer" + why;
  if (c.tokenizer == "hf" && check_tokenizer) {
    try {
      gguf_vocab_of_hf(c.tokenizer_json, c.vocab_size);
    } catch (const UsageError& e) {
      return e.what();
    }
  }
  return "";
}

namespace {

// The GGUF weight types export writes (ggml's names).
const Choices<uint32_t, 4> kGgufTypes{
    "GGUF type",
    {{io::kGgmlF32, "f32", "fp32 weights"},
     {io::kGgmlF16, "f16", "fp16 weights"},
     {io::kGgmlQ8_0, "q8_0", "int8 blocks of 32 with an fp16 scale (a q8_0 checkpoint copied code for code)"},
     {io::kGgmlQ4_0, "q4_0", "4-bit blocks of 32 with an fp16 scale (a q4_0 checkpoint copied code for code)"}}};

uint32_t ggml_type_of(const std::string& t) {
  try {
    return kGgufTypes.parse(t);
  } catch (const UsageError& e) {
    throw UsageError(std::string("export: ") + e.what());
  }
}

// The llama.cpp file type (general.file_type) of an all-`type` file.
uint32_t file_type_of(uint32_t t) {
  switch (t) {
    case io::kGgmlF32: return 0;
    case io::kGgmlF16: return 1;
    case io::kGgmlQ4_0: return 2;
    default: return 7;  // q8_0
  }
}

// Row r of a packed q8_0 / q4_0 matrix (looplm's 16-row tiles, docs/format.md) as ggml blocks
// (q8_0: fp16 d + 32 int8; q4_0: fp16 d + 16 bytes, column j in the low nibble of byte j and
// column j + 16 in the high one): the same scale and codes, so nothing is quantized again.
void packed_row_to_ggml(const WeightFormat& f, const void* packed, int64_t cols, int64_t r, uint8_t* out) {
  const int64_t nb = (cols + kQBlock - 1) / kQBlock, tile = r / kQTile, lane = r % kQTile;
  if (!std::strcmp(f.name, "q8_0")) {
    const auto* blocks = static_cast<const BlockQ8_0x16*>(packed) + tile * nb;
    for (int64_t b = 0; b < cols / kQBlock; ++b, out += 34) {
      std::memcpy(out, &blocks[b].d[lane], 2);
      for (int c = 0; c < kQBlock; ++c) out[2 + c] = (uint8_t)(int8_t)((int)blocks[b].qs[c / 4][lane][c % 4] - 128);
    }
  } else {
    const auto* blocks = static_cast<const BlockQ4_0x16*>(packed) + tile * nb;
    for (int64_t b = 0; b < cols / kQBlock; ++b, out += 18) {
      std::memcpy(out, &blocks[b].d[lane], 2);
      for (int c = 0; c < 16; ++c) out[2 + c] = blocks[b].qs[c / 4][lane][c % 4];  // low: c, high: c + 16, as ggml
    }
  }
}

}  // namespace

std::vector<std::string> available_gguf_types() { return kGgufTypes.names(); }

GgufExportReport export_gguf(Model& m, const std::string& path, const GgufExportOptions& o) {
  const Config& c = m.config();
  if (std::string why = gguf_export_refusal(c, false); !why.empty())
    throw UsageError("export: cannot write this model as GGUF: " + why + ". " + kGgufWayOut);
  ParamStore& ps = m.params();
  const WeightFormat* own = ps.prepacked_format();
  if (own && std::strcmp(own->name, "q8_0") && std::strcmp(own->name, "q4_0") && o.type.empty())
    throw UsageError(std::string("export: the checkpoint is ") + own->name +
                     ", which GGUF export does not copy code for code; name the GGUF type with --type (" + kGgufTypes.list() +
                     ": quantized again from its values)");
  const std::string type_name = !o.type.empty() ? o.type : own ? own->name : "f32";
  const uint32_t type = ggml_type_of(type_name);
  const bool exact = own && type_name == own->name;
  if (exact) m.prepare_inference(*own);  // the packed bytes, in place

  // Which weight matrix (and rows within it) each param is, for the code-for-code copy.
  std::map<int, std::pair<const WeightMatrix*, int64_t>> packed_rows;
  if (exact)
    for (const WeightMatrix& w : ps.matrices()) {
      int64_t row = 0;
      for (int p = w.first; p <= w.last; ++p) {
        packed_rows[p] = {&w, row};
        row += ps.infos()[p].shape[0];
      }
    }

  const std::string arch = c.R == 1 ? "llama" : "nanbeige";
  const int64_t d = c.d_model, hd = c.head_dim(), V = c.vocab_size;
  io::GgufWriter w;
  w.add_string("general.architecture", arch);
  w.add_string("general.name", o.name);
  w.add_u32("general.file_type", file_type_of(type));
  w.add_u32("general.alignment", 32);
  w.add_u32(arch + ".context_length", (uint32_t)c.context);
  w.add_u32(arch + ".embedding_length", (uint32_t)d);
  w.add_u32(arch + ".block_count", (uint32_t)c.n_core);
  w.add_u32(arch + ".feed_forward_length", (uint32_t)c.ff_dim());
  w.add_u32(arch + ".attention.head_count", (uint32_t)c.n_heads);
  w.add_u32(arch + ".attention.head_count_kv", (uint32_t)c.kv_heads());
  if (hd * c.n_heads != d) {  // llama.cpp's default head dimension is embedding_length / head_count
    w.add_u32(arch + ".attention.key_length", (uint32_t)hd);
    w.add_u32(arch + ".attention.value_length", (uint32_t)hd);
  }
  w.add_u32(arch + ".rope.dimension_count", (uint32_t)hd);
  w.add_f32(arch + ".attention.layer_norm_rms_epsilon", (float)c.norm_eps);
  w.add_f32(arch + ".rope.freq_base", (float)c.rope_base);
  w.add_u32(arch + ".vocab_size", (uint32_t)V);
  if (arch == "nanbeige") {
    w.add_u32("nanbeige.num_loops", (uint32_t)c.R);
    // loop_norm: the final norm between loops too, as Nanbeige (docs/systems.md, the residual rule)
    w.add_bool("nanbeige.skip_loop_final_norm", !c.get_bool("loop_norm"));
  }
  GgufVocab vocab;
  try {  // built once, here: a tokenizer llama.cpp cannot run is refused saying why
    vocab = c.tokenizer == "hf" ? gguf_vocab_of_hf(c.tokenizer_json, V) : gguf_byte_vocab(V);
  } catch (const UsageError& e) {
    throw UsageError(std::string("export: cannot write this model as GGUF: ") + e.what());
  }
  apply_text_conventions(vocab, c.text);  // a converted model's own end tokens, BOS and chat template
  write_gguf_vocab(w, vocab);

  int n_tensors = 0;
  // A param as a GGUF tensor. Vectors are f32 (llama.cpp keeps norms in f32); matrices in `type`,
  // their rows permuted for RoPE when `rope` is set.
  auto add = [&](const std::string& looplm_name, const std::string& gguf_name, bool rope) {
    const int p = ps.find(looplm_name);
    if (p < 0) throw Error("export: the model has no parameter '" + looplm_name + "'");
    const ParamInfo& info = ps.infos()[p];
    ++n_tensors;
    if (info.shape.size() == 1) {
      const float* v = ps.value(p);
      const int64_t n = info.shape[0];
      w.add_tensor(gguf_name, io::kGgmlF32, {n}, [v, n](uint8_t* out) { std::memcpy(out, v, n * sizeof(float)); });
      return;
    }
    const int64_t rows = info.shape[0], cols = info.shape[1];
    const uint64_t rb = io::ggml_row_bytes(type, cols);
    const float* v = ps.value(p);
    auto src_row = [rope, hd](int64_t r) { return rope ? gguf_layout::rope_source_row(r, hd) : r; };
    auto it = packed_rows.find(p);
    if (it != packed_rows.end()) {
      const WeightMatrix* wm = it->second.first;
      const int64_t row0 = it->second.second;
      w.add_tensor(gguf_name, type, {cols, rows}, [=](uint8_t* out) {
        for (int64_t r = 0; r < rows; ++r)
          packed_row_to_ggml(*wm->packed.format, wm->packed.data, cols, row0 + src_row(r), out + r * rb);
      });
    } else {
      w.add_tensor(gguf_name, type, {cols, rows}, [=](uint8_t* out) {
        for (int64_t r = 0; r < rows; ++r) io::quantize_row_ggml(type, v + src_row(r) * cols, cols, out + r * rb);
      });
    }
  };

  // Every param must be one this map writes: a layout change that adds one is refused, not dropped.
  std::map<std::string, bool> written;
  for (const ParamInfo& info : ps.infos()) written[info.name] = false;
  auto add_marked = [&](const std::string& ln, const std::string& gn, bool rope) {
    add(ln, gn, rope);
    written[ln] = true;
  };
  add_marked("tok_emb.weight", "token_embd.weight", false);
  for (int i = 0; i < c.n_core; ++i)
    for (const auto& t : gguf_layout::block_tensors())
      add_marked("core." + std::to_string(i) + "." + t.looplm, "blk." + std::to_string(i) + "." + t.gguf, t.rope_rows);
  add_marked("norm_f.weight", "output_norm.weight", false);
  if (!c.tie_embeddings) add_marked("lm_head.weight", "output.weight", false);  // tied: llama.cpp reads token_embd
  for (const auto& [name, done] : written)
    if (!done) throw UsageError("export: parameter '" + name + "' has no place in a GGUF Llama block; cannot export this model");

  w.write(path);
  GgufExportReport rep;
  rep.arch = arch;
  rep.type = type_name;
  rep.tensors = n_tensors;
  rep.bytes = w.file_bytes();
  rep.exact_codes = exact;
  rep.notes = vocab.notes;
  return rep;
}

}  // namespace looplm

// GGUF → looplm (docs/interchange.md): the `llama` and `nanbeige` architectures, quantized
// matrices kept code for code.
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "backend/cpu/quant.h"
#include "tokenizer/tokenizer.h"
#include "interchange/gguf_layout.h"
#include "interchange/gguf_vocab.h"
#include "interchange/gguf_model.h"
#include "io/gguf.h"
#include "looplm/error.h"
#include "model/model_io.h"

namespace looplm {

namespace {

// One ggml row (q8_0 / q4_0 blocks) into row `r` of looplm's 16-row tiles: the same scales and
// codes (q8_0 u = q + 128; q4_0's nibbles are the same codes), so nothing is rounded again.
void ggml_row_to_packed(uint32_t type, const uint8_t* in, int64_t cols, int64_t r, void* packed) {
  const int64_t nb = cols / kQBlock, tile = r / kQTile, lane = r % kQTile;
  if (type == io::kGgmlQ8_0) {
    auto* blocks = static_cast<BlockQ8_0x16*>(packed) + tile * nb;
    for (int64_t b = 0; b < nb; ++b, in += 34) {
      std::memcpy(&blocks[b].d[lane], in, 2);
      for (int c = 0; c < kQBlock; ++c) blocks[b].qs[c / 4][lane][c % 4] = (uint8_t)((int)(int8_t)in[2 + c] + 128);
    }
  } else {
    auto* blocks = static_cast<BlockQ4_0x16*>(packed) + tile * nb;
    for (int64_t b = 0; b < nb; ++b, in += 18) {
      std::memcpy(&blocks[b].d[lane], in, 2);
      for (int c = 0; c < 16; ++c) blocks[b].qs[c / 4][lane][c % 4] = in[2 + c];
    }
  }
}

struct Source {
  const io::GgufFile::Tensor* tensor;
  bool rope;
};


// The model's shape from the file's metadata (a looped Llama stack: llama, or nanbeige with its
// loops): dimensions checked against bounds, the features looplm does not have refused by name.
Config gguf_model_shape(const io::GgufFile& f, const std::string& path, const std::string& arch) {
  const std::string k = arch + ".";
  auto need_int = [&](const std::string& key, uint64_t lo, uint64_t hi) {
    if (f.has(key) && f.get(key).type == io::kGgufArray)
      throw Error(path + ": '" + key + "' differs between blocks; looplm's blocks share one shape");
    const uint64_t v = f.get_uint(key);
    if (v < lo || v > hi) throw Error(path + ": '" + key + "' = " + std::to_string(v) + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
    return (int)v;
  };
  Config c;
  c.d_model = need_int(k + "embedding_length", 1, 65536);
  c.n_core = need_int(k + "block_count", 1, 1024);
  c.d_ff = need_int(k + "feed_forward_length", 1, 1 << 20);
  c.n_heads = need_int(k + "attention.head_count", 1, 65536);
  const int kv_heads = f.has(k + "attention.head_count_kv") ? need_int(k + "attention.head_count_kv", 1, 65536) : c.n_heads;
  if (c.n_heads % kv_heads)
    throw Error(path + ": head_count " + std::to_string(c.n_heads) + " is not a multiple of head_count_kv " + std::to_string(kv_heads));
  if (kv_heads != c.n_heads) c.n_kv_heads = kv_heads;  // grouped-query attention
  if (f.has(k + "attention.key_length")) {  // llama.cpp's default is embedding_length / head_count
    const int kl = need_int(k + "attention.key_length", 1, 1024);
    if (f.has(k + "attention.value_length") && need_int(k + "attention.value_length", 1, 1024) != kl)
      throw Error(path + ": attention.value_length differs from attention.key_length (looplm's keys and values share the head dimension)");
    if (kl * c.n_heads != c.d_model) c.d_head = kl;
  }
  if (c.d_head == 0 && c.d_model % c.n_heads)
    throw Error(path + ": embedding_length " + std::to_string(c.d_model) + " is not a multiple of head_count, and no attention.key_length");
  if (f.has(k + "rope.dimension_count") && (int)f.get_uint(k + "rope.dimension_count") != c.head_dim())
    throw Error(path + ": RoPE on part of each head (rope.dimension_count " + std::to_string(f.get_uint(k + "rope.dimension_count")) +
                " of " + std::to_string(c.head_dim()) + "): looplm rotates whole heads");
  if (f.has(k + "rope.scaling.type") && f.get_string(k + "rope.scaling.type") != "none")
    throw Error(path + ": RoPE scaling '" + f.get_string(k + "rope.scaling.type") + "' is not supported");
  c.context = (int)std::min<uint64_t>(f.get_uint(k + "context_length", 2048), 1 << 20);
  c.norm_eps = f.get_float(k + "attention.layer_norm_rms_epsilon");
  c.rope_base = f.get_float(k + "rope.freq_base", 10000.0);
  c.block = "pre_norm", c.norm = "rmsnorm", c.mlp = "swiglu", c.pos = "rope", c.bias = false, c.loop_rule = "residual";
  c.R = 1;
  if (arch == "nanbeige") {
    c.R = (int)f.get_uint("nanbeige.num_loops", 1);
    if (c.R < 1 || c.R > 4096) throw Error(path + ": nanbeige.num_loops " + std::to_string(c.R) + " is outside 1..4096");
    // Nanbeige norms at each loop boundary unless the file says to skip it: the residual rule's
    // loop_norm (docs/systems.md).
    if (c.R > 1 && !f.get_bool("nanbeige.skip_loop_final_norm", false)) c.set("loop_norm", "true");
  }
  return c;
}

// The packed matrices, row by row from the GGUF blocks, kept code for code (q, k and v are one
// [3d, d] matrix in looplm: rows of three tensors; RoPE rows reordered to rotate-half).
void read_packed(const std::string& path, const WeightFormat& fmt, uint32_t type, const std::map<std::string, Source>& source,
                 int64_t hd, ParamStore& ps) {
  size_t total = 0;
  std::vector<size_t> offsets;
  for (const WeightMatrix& w : ps.matrices()) {
    offsets.push_back(total);
    total += (fmt.packed_bytes(w.node->rows, w.node->cols) + 63) / 64 * 64;
  }
  auto buf = std::shared_ptr<uint8_t[]>(new uint8_t[std::max<size_t>(total, 1)]());
  std::map<int, const void*> data;
  size_t mi = 0;
  for (const WeightMatrix& w : ps.matrices()) {
    uint8_t* dst = buf.get() + offsets[mi++];
    int64_t row = 0;
    for (int p = w.first; p <= w.last; ++p) {
      const ParamInfo& info = ps.infos()[p];
      const Source& s = source.at(info.name);
      const int64_t rows = info.shape[0], cols = info.shape[1];
      if (s.tensor->shape() != info.shape)
        throw Error(path + ": tensor '" + s.tensor->name + "' has shape " + io::shape_str(s.tensor->shape()) + ", expected " + io::shape_str(info.shape));
      const uint64_t rb = io::ggml_row_bytes(type, cols);
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* src = s.tensor->data + (s.rope ? gguf_layout::rope_target_row(r, hd) : r) * rb;
        for (int64_t b = 0; b < cols / kQBlock; ++b) {  // a scale of NaN / Inf is a broken file
          uint16_t h;
          std::memcpy(&h, src + b * (type == io::kGgmlQ8_0 ? 34 : 18), 2);
          if (!std::isfinite(fp16_to_fp32(h))) throw Error(path + ": tensor '" + s.tensor->name + "' holds a NaN or Inf scale");
        }
        ggml_row_to_packed(type, src, cols, row + r, dst);
      }
      row += rows;
    }
    data[w.first] = dst;
  }
  ps.set_prepacked(fmt, std::move(data), std::shared_ptr<const void>(buf, buf.get()), /*values_unset=*/true);
}

}  // namespace

GgufImportReport import_gguf(const std::string& path, const std::string& out_file) {
  const io::GgufFile f = io::GgufFile::open(path);
  const std::string arch = f.get_string("general.architecture");
  if (arch != "llama" && arch != "nanbeige")
    throw Error(path + ": architecture '" + arch + "': looplm reads GGUF files of arch llama and nanbeige (a looped Llama stack)");
  Config c = gguf_model_shape(f, path, arch);

  // The vocabulary: looplm's byte tokenizer, a byte-level BPE or a SentencePiece BPE (gguf_vocab.h), carried in the checkpoint.
  const ImportedVocab vocab = read_gguf_vocab(f, path);
  GgufImportReport rep;
  rep.arch = arch;
  c.tokenizer = vocab.kind;
  c.tokenizer_json = vocab.tokenizer_json;
  c.vocab_size = (int)vocab.size;
  c.text = read_gguf_text_conventions(f, path, vocab, rep.notes);  // end tokens, BOS, chat template
  if (vocab.kind == "hf") {
    try {
      Tokenizer::hf_from_json(vocab.tokenizer_json, path + " (its vocabulary)");
    } catch (const Error& e) {
      throw Error(std::string("the vocabulary does not make a tokenizer: ") + e.what());
    }
  }
  c.tie_embeddings = f.find("output.weight") == nullptr;
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(path + ": the model it describes is not valid for looplm: " + e.what());
  }

  // Every tensor of the file must have its place, and every param its tensor.
  std::map<std::string, Source> source;  // looplm param -> GGUF tensor
  std::set<std::string> used;
  auto bind = [&](const std::string& ln, const std::string& gn, bool rope) {
    const io::GgufFile::Tensor* t = f.find(gn);
    if (!t) throw Error(path + ": tensor '" + gn + "' is missing");
    source[ln] = {t, rope};
    used.insert(gn);
  };
  bind("tok_emb.weight", "token_embd.weight", false);
  for (int i = 0; i < c.n_core; ++i)
    for (const auto& t : gguf_layout::block_tensors())
      bind("core." + std::to_string(i) + "." + t.looplm, "blk." + std::to_string(i) + "." + t.gguf, t.rope_rows);
  bind("norm_f.weight", "output_norm.weight", false);
  if (!c.tie_embeddings) bind("lm_head.weight", "output.weight", false);
  for (const auto& t : f.tensors())
    if (!used.count(t.name))
      throw Error(path + ": tensor '" + t.name + "' has no place in looplm's Llama block (biases, RoPE frequency factors and other extras are not supported)");

  // Every tensor's shape against the layout before anything is allocated (a file's dimensions
  // decide the model's size: they are checked against its own tensors first).
  for (const ParamInfo& info : Model::layout(c)) {
    const io::GgufFile::Tensor& t = *source.at(info.name).tensor;
    if (t.shape() != info.shape && !(info.shape.size() == 1 && t.numel() == info.shape[0]))
      throw Error(path + ": tensor '" + t.name + "' has shape " + io::shape_str(t.shape()) + ", expected " + io::shape_str(info.shape));
  }
  ParamStorage storage;
  storage.grads = false;
  Model m(c, storage);
  ParamStore& ps = m.params();
  const int64_t hd = c.head_dim();

  // The weight format: the matrices' one quantized type, kept code for code; else fp32 values.
  std::set<uint32_t> matrix_types;
  for (const WeightMatrix& w : ps.matrices())
    for (int p = w.first; p <= w.last; ++p) matrix_types.insert(source.at(ps.infos()[p].name).tensor->type);
  const WeightFormat* fmt = nullptr;
  if (matrix_types.size() == 1 && (*matrix_types.begin() == io::kGgmlQ8_0 || *matrix_types.begin() == io::kGgmlQ4_0))
    fmt = find_weight_format(*matrix_types.begin() == io::kGgmlQ8_0 ? "q8_0" : "q4_0");
  else {
    bool quantized = false;
    for (uint32_t t : matrix_types) quantized |= t != io::kGgmlF32 && t != io::kGgmlF16 && t != io::kGgmlBF16;
    if (quantized)
      rep.notes.push_back("the weight matrices mix types; they are read as fp32 values (exact); `looplm quantize` makes a quantized checkpoint of them");
  }
  rep.weights = fmt ? fmt->name : "fp32";

  std::set<int> packed_params;
  if (fmt)
    for (const WeightMatrix& w : ps.matrices())
      for (int p = w.first; p <= w.last; ++p) packed_params.insert(p);

  // fp32 values: every param not held packed (norms, an untied embedding; everything for fp32).
  for (size_t p = 0; p < ps.infos().size(); ++p) {
    if (packed_params.count((int)p)) continue;
    const ParamInfo& info = ps.infos()[p];
    const Source& s = source.at(info.name);
    float* dst = ps.value((int)p);
    f.read_f32(s.tensor->name, info.shape, dst);
    if (s.rope) {  // GGUF's adjacent pairs back to rotate-half rows
      const int64_t rows = info.shape[0], cols = info.shape[1];
      std::vector<float> tmp(dst, dst + rows * cols);
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(dst + r * cols, tmp.data() + gguf_layout::rope_target_row(r, hd) * cols, cols * sizeof(float));
    }
    for (int64_t i = 0; i < (int64_t)info.numel; ++i)
      if (!std::isfinite(dst[i])) throw Error(path + ": tensor '" + s.tensor->name + "' holds NaN or Inf");
  }

  if (fmt) {
    read_packed(path, *fmt, *matrix_types.begin(), source, hd, ps);
    m.prepare_inference(*fmt);
    save_model_packed(out_file, m, {{"converted_from", path}});
  } else {
    save_model(out_file, m, {{"converted_from", path}});
  }
  rep.tensors = (int)f.tensors().size();
  return rep;
}

}  // namespace looplm

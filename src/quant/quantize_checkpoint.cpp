// quantize_checkpoint (include/looplm/looplm.h): a fp32 checkpoint to a quantized one, by
// round-to-nearest (the weight format's own packing) or GPTQ (gptq.h).
#include <sys/stat.h>

#include "backend/cpu/weight_format.h"
#include "core/threads.h"
#include "data/dataset.h"
#include "tokenizer/tokenizer.h"
#include "io/json_input.h"
#include "looplm/looplm.h"
#include "looplm/util.h"
#include "model/model_io.h"
#include "quant/gptq.h"

namespace looplm {

QuantizeResult quantize_checkpoint(const std::string& checkpoint, const std::string& out, const QuantizeOptions& o) {
  const WeightFormat* f = find_weight_format(o.format);
  if (!f || o.format == "fp32" || o.format == "bf16")
    throw UsageError("quantize: the format is q8_0, q4_0 or q4_k, not '" + io::brief(o.format) + "'");
  if (o.method != "rtn" && o.method != "gptq") throw UsageError("quantize: the method is rtn or gptq, not '" + io::brief(o.method) + "'");
  if (o.calib_tokens < 1) throw UsageError("quantize: calibration tokens must be >= 1");
  const std::string in = checkpoint_file(checkpoint);
  struct stat st, si;
  if (::stat(out.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw UsageError("quantize: --out " + out + " is a directory; name the file to write (e.g. " + out + "/model." + o.format + ".safetensors)");
  if (::stat(in.c_str(), &si) == 0 && ::stat(out.c_str(), &st) == 0 && si.st_ino == st.st_ino && si.st_dev == st.st_dev)
    throw UsageError("quantize: --out is the input checkpoint; write the quantized one beside it");

  LoadModelOptions lo;
  lo.allow_nonfinite = o.allow_nonfinite;
  std::unique_ptr<Model> m = load_model(in, lo);
  if (const WeightFormat* own = m->params().prepacked_format())
    throw UsageError("quantize: " + in + " is already " + own->name + "; quantize the fp32 checkpoint");
  QuantizeResult r;
  r.format = f->name;
  r.method = o.method;
  std::map<std::string, std::string> meta = {{"quantize_method", o.method}};
  if (o.method == "gptq") {
    r.calib = o.calib.empty() ? m->config().data_train : o.calib;
    GptqOptions go;
    go.tokens = load_tokens(r.calib, Tokenizer::from_config(m->config()));
    go.max_tokens = o.calib_tokens;
    go.first_step_only = o.calib_first_step_only;
    const GptqReport rep = quantize_gptq(*m, *f, go);
    r.calib_tokens = rep.tokens;
    r.rtn_error = rep.rtn_error;
    r.gptq_error = rep.gptq_error;
    meta["calib"] = r.calib;
    meta["calib_tokens"] = std::to_string(rep.tokens);
    meta["calib_steps"] = o.calib_first_step_only ? "first" : "all";
  } else {
    adapt_threads();  // the pool's size for packing, from the load measured since set_threads
    m->prepare_inference(*f);
  }
  save_model_packed(out, *m, meta);
  r.matrices = (int)m->params().matrices().size();
  struct stat so;
  r.in_bytes = ::stat(in.c_str(), &si) == 0 ? (uint64_t)si.st_size : 0;
  r.out_bytes = ::stat(out.c_str(), &so) == 0 ? (uint64_t)so.st_size : 0;
  return r;
}

}  // namespace looplm

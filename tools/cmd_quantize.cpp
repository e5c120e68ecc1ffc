// `looplm quantize`: a checkpoint's weight matrices to a quantized weight format (q8_0, q4_0, q4_k),
// written as a safetensors checkpoint that eval, generate and info read directly (docs/format.md).
#include <sys/stat.h>

#include <cstdio>

#include "backend/cpu/weight_format.h"
#include "cli.h"
#include "cli_common.h"
#include "io/json_input.h"
#include "core/threads.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "model/model_io.h"
#include "quant/gptq.h"

namespace looplm::cli {

int cmd_quantize(int argc, char** argv) {
  CLI::App app{"Quantize a checkpoint's weight matrices (norms, biases and the rest stay fp32).", "looplm quantize"};
  std::string in, out, format, method = "rtn";
  bool allow_nonfinite = false;
  app.add_option("--checkpoint", in, "the fp32 model.safetensors (or its run directory)")->required()->type_name("FILE");
  app.add_option("--format", format, "q8_0 (8.5 bits per weight), q4_0 or q4_k (4.5 bits per weight; q4_k: 6-bit scales and mins per 32 in super-blocks of 256)")
      ->required()
      ->check(CLI::IsMember({"q8_0", "q4_0", "q4_k"}));
  app.add_option("--method", method,
                 "rtn: each block's grid from its own values (q8_0 / q4_0: the largest; q4_k: a least-squares scale and min), every weight rounded to nearest (default); gptq: "
                 "GPTQ on calibration text, each weight's rounding error moved onto the weights not yet quantized")
      ->check(CLI::IsMember({"rtn", "gptq"}));
  std::string calib, calib_steps = "all";
  int64_t calib_tokens = 16384;
  app.add_option("--calib", calib, "gptq: calibration text (default: the checkpoint's data_train)")->type_name("FILE");
  app.add_option("--calib-tokens", calib_tokens, "gptq: calibration tokens, in whole context windows (default 16384)")
      ->check(at_least(1));
  app.add_option("--calib-steps", calib_steps,
                 "gptq: a shared core block's inputs from every loop step it runs in (all, default: loop-aware) or "
                 "from the first step only (first)")
      ->check(CLI::IsMember({"all", "first"}));
  app.add_option("--out", out, "the quantized checkpoint to write (a .safetensors file)")->required()->type_name("FILE");
  app.add_flag("--allow-nonfinite", allow_nonfinite, "quantize a checkpoint whose tensors hold NaN/Inf");
  ThreadsArg threads;
  threads.add(app);
  if (!parse(app, argc, argv, "quantize")) return 0;
  set_threads(threads.n);
  struct stat st;
  if (::stat(in.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) in += "/model.safetensors";
  if (::stat(out.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw UsageError("quantize: --out " + out + " is a directory; name the file to write (e.g. " + out + "/model." + format + ".safetensors)");
  struct stat si;
  if (::stat(in.c_str(), &si) == 0 && ::stat(out.c_str(), &st) == 0 && si.st_ino == st.st_ino && si.st_dev == st.st_dev)
    throw UsageError("quantize: --out is the input checkpoint; write the quantized one beside it");

  LoadModelOptions lo;
  lo.allow_nonfinite = allow_nonfinite;
  std::unique_ptr<Model> m = load_model(in, lo);
  if (const WeightFormat* own = m->params().prepacked_format())
    throw UsageError("quantize: " + in + " is already " + own->name + "; quantize the fp32 checkpoint");
  const WeightFormat* f = find_weight_format(format);
  std::map<std::string, std::string> meta = {{"quantize_method", method}};
  if (method == "gptq") {
    if (calib.empty()) calib = m->config().data_train;
    GptqOptions go;
    go.tokens = load_tokens(calib, Tokenizer::from_config(m->config()));
    go.max_tokens = calib_tokens;
    go.first_step_only = calib_steps == "first";
    const GptqReport rep = quantize_gptq(*m, *f, go);
    std::printf("gptq: %lld calibration tokens from %s (%s loop steps); layer-output error summed over %d matrices: "
                "rtn %.4g, gptq %.4g\n", (long long)rep.tokens, calib.c_str(), calib_steps == "all" ? "all" : "the first",
                rep.matrices, rep.rtn_error, rep.gptq_error);
    meta["calib"] = calib;
    meta["calib_tokens"] = std::to_string(rep.tokens);
    meta["calib_steps"] = calib_steps;
  } else {
    adapt_threads();  // the pool's size for packing, from the load measured since set_threads
    m->prepare_inference(*f);
  }
  save_model_packed(out, *m, meta);
  struct stat so;
  const double in_mb = ::stat(in.c_str(), &si) == 0 ? si.st_size / 1e6 : 0, out_mb = ::stat(out.c_str(), &so) == 0 ? so.st_size / 1e6 : 0;
  std::printf("%s: %zu weight matrices as %s (%s), the rest fp32: %.2f MB -> %.2f MB (%.2fx smaller)\n", out.c_str(),
              m->params().matrices().size(), f->name, method.c_str(), in_mb, out_mb, out_mb > 0 ? in_mb / out_mb : 0.0);
  return 0;
}

}  // namespace looplm::cli

// `looplm quantize`: a checkpoint's weight matrices to a quantized weight format (q8_0, q4_0, q4_k),
// written as a safetensors checkpoint that eval, generate and info read directly (docs/format.md).
#include <cstdio>

#include "cli.h"
#include "cli_common.h"
#include "looplm/looplm.h"

namespace looplm::cli {

int cmd_quantize(int argc, char** argv) {
  CLI::App app{"Quantize a checkpoint's weight matrices (norms, biases and the rest stay fp32).", "looplm quantize"};
  std::string in, out, format, method = "rtn";
  bool allow_nonfinite = false;
  app.add_option("--checkpoint", in, "the fp32 model.safetensors (or its run directory)")->required()->type_name("FILE");
  app.add_option("--format", format, "q8_0 (8.5 bits per weight), q4_0 or q4_k (4.5 bits per weight; q4_k: 6-bit scales and mins per 32 in super-blocks of 256)")
      ->required()
      ->check(CLI::IsMember(available_quantized_formats()));
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
  QuantizeOptions o;
  o.format = format;
  o.method = method;
  o.calib = calib;
  o.calib_tokens = calib_tokens;
  o.calib_first_step_only = calib_steps == "first";
  o.allow_nonfinite = allow_nonfinite;
  const QuantizeResult r = quantize_checkpoint(in, out, o);
  if (r.method == "gptq")
    std::printf("gptq: %lld calibration tokens from %s (%s loop steps); layer-output error summed over %d matrices: "
                "rtn %.4g, gptq %.4g\n", (long long)r.calib_tokens, r.calib.c_str(), calib_steps == "all" ? "all" : "the first",
                r.matrices, r.rtn_error, r.gptq_error);
  const double in_mb = r.in_bytes / 1e6, out_mb = r.out_bytes / 1e6;
  std::printf("%s: %d weight matrices as %s (%s), the rest fp32: %.2f MB -> %.2f MB (%.2fx smaller)\n", out.c_str(),
              r.matrices, r.format.c_str(), r.method.c_str(), in_mb, out_mb, out_mb > 0 ? in_mb / out_mb : 0.0);
  return 0;
}

}  // namespace looplm::cli

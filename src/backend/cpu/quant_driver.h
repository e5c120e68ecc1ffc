// What the quantized formats (quant.cpp: q8_0, q4_0; quant_k.cpp: q4_k) share: the CPU checks,
// the kernel choice, and the drivers that split a product into row groups (tiles of
// 16 rows for all three). A format supplies its group kernel per ISA — the products of one
// group of weight rows with up to GroupKernel::inputs quantized input rows, each weight read once
// for all of them — and its dequantization for the many-rows path.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cpu/gemm.h"
#include "backend/cpu/quant.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LOOPLM_QUANT_X86 1
#define LOOPLM_AVX2_Q __attribute__((target("avx2,fma,f16c")))
#define LOOPLM_VNNI_Q __attribute__((target("avx512f,avx512bw,avx512vnni,f16c,fma")))
#endif

// A group kernel's body per input count NX (1..kGroupInputs, unrolled, so the accumulators stay in
// registers): `body<NX>(blocks, x, out)`.
#define LOOPLM_BY_INPUTS(body, blocks, x, nx, out) \
  switch (nx) {                                    \
    case 1: return body<1>(blocks, x, out);        \
    case 2: return body<2>(blocks, x, out);        \
    case 3: return body<3>(blocks, x, out);        \
    default: return body<4>(blocks, x, out);       \
  }
#define LOOPLM_BY_INPUTS8(body, blocks, x, nx, out) \
  switch (nx) {                                     \
    case 1: return body<1>(blocks, x, out);         \
    case 2: return body<2>(blocks, x, out);         \
    case 3: return body<3>(blocks, x, out);         \
    case 4: return body<4>(blocks, x, out);         \
    case 5: return body<5>(blocks, x, out);         \
    case 6: return body<6>(blocks, x, out);         \
    case 7: return body<7>(blocks, x, out);         \
    default: return body<8>(blocks, x, out);        \
  }

namespace looplm {

// WeightFormat::serial_decode_flops of the integer formats (q8_0, q4_0, q4_k): their products are
// ~4x cheaper per FLOP than fp32's, so a second thread pays for its fork and join only from ~70
// MFLOP per token (the measured break-even lay between 66 and 81: bench/README.md, "Threads").
constexpr double kIntegerSerialDecodeFlops = 72e6;

// The most input rows one group kernel call multiplies (batched decoding reads each weight block
// once for up to this many sequences; more would spill the accumulators out of the registers).
constexpr int kGroupInputs = 8;

// out[n · rows + r] = (row r of the group) · x[n] for n < nx ≤ the kernel's `inputs`. `group` is
// the group's first byte, `cols` the matrix's columns. The value for one input row does not depend
// on nx (each row's sums are its own), so batched decoding gives the bits of decoding alone.
using GroupFn = void (*)(const uint8_t* group, int cols, const QuantizedRow* const* x, int nx, float* out);
struct GroupKernel {
  GroupFn f = nullptr;
  int rows = 0;    // weight rows per group
  int inputs = 0;  // input rows per call, at most kGroupInputs
  explicit operator bool() const { return f != nullptr; }
};
// packed -> fp32 row-major, rows [0, n) from a group boundary.
using UnpackFn = void (*)(const void* packed, int64_t rows, int64_t cols, float* dst);

bool have_avx2_q();  // AVX2 + FMA + F16C
bool have_vnni_q();  // AVX-512 F/BW/VNNI besides
// The kernel for `k` (best: this CPU's best) among a format's three (avx2 / vnni: none when f is null).
GroupKernel pick_group_kernel(GemvKernel k, GroupKernel portable, GroupKernel avx2, GroupKernel vnni);

// y[R] (+)= W x: x quantized once, the row groups split between the threads.
void quant_gemv(int R, int C, const void* W, size_t group_bytes, const float* x, float* y, bool accumulate, GroupKernel f);
// y[N, R] = x[N, C] · W^T. Up to max(kFewRows, max_integer_rows) rows (batched decoding, short
// prompts): the integer products, kFewRows rows at a time, each row quantized once and each group
// kernel call taking up to f.inputs of them. More rows (long prompts, evaluation): panels of 64
// weight rows dequantized (exactly) into a per-thread buffer of quant_scratch floats and multiplied
// there in fp32, the panels split between the threads, against the activations quantized to int8
// per block and dequantized: both paths compute one function (up to fp32 summation order), so a
// loss or a logit does not depend on how many rows a product had. The crossover is the format's
// (WeightFormat::integer_rows), where the integer kernel's rate falls below the fp32 GEMM's once
// the dequantization is paid. The measured crossovers lie between a few dozen and a few hundred
// rows, a whole model's prefill ran at the same speed either way near them, and the integer path
// skips oneDNN's one-time JIT in a process's first prompt: hence 128 rows for every format (the
// measurements: bench/README.md, "Kernel decisions").
void quant_gemm(int N, int R, int C, const void* W, size_t group_bytes, const float* x, float* y, float* scratch,
                GroupKernel f, UnpackFn unpack, int max_integer_rows);
size_t quant_scratch(int64_t R, int64_t C);

}  // namespace looplm

// Kernels chosen by the CPU's features: a function marked LOOPLM_ISA_CLONES is compiled for
// AVX-512, AVX2+FMA and baseline x86-64, and the loader picks the best variant for the CPU it runs
// on (GCC function multi-versioning), so one portable binary uses the wide units where they exist.
// Keep such functions free of OpenMP regions (the outlined body would not be cloned): parallelise
// in the caller and clone the serial inner loop.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LOOPLM_ISA_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LOOPLM_ISA_CLONES
#endif

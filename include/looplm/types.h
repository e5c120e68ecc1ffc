// The public types the library's lower layers share with the API (looplm.h includes this): the
// version written into checkpoints and the KV policy a cache keeps. Here, not in looplm.h, so that
// src/model and below need not include the facade (docs/architecture.md, "Layers of the code").
#pragma once
#include <string>

namespace looplm {

inline constexpr const char* kVersion = "0.3.0";  // `looplm --version`, and written into checkpoints
// What this build is: "0.3.0 (git 8aa855f2c1d0)" (the commit it was built at; "-dirty" with local
// changes; no commit outside a git clone).
std::string version_text();
// The CPU features this process's kernels use, as their names ("avx2 fma f16c avx512 ..."; "none":
// the portable kernels only).
std::string cpu_features_text();

// What incremental decoding keeps for a token that exited before a loop step later tokens run
// (docs/cli.md, generate). per_step: the token's missing steps run for their keys and values
// (exact: the same result as a full forward pass; saves no loop steps). mean: one key/value per
// block, the mean over the steps the token ran (least memory). last / first: later steps read the
// token's last / first step's key and value. With the fixed rule no token exits early and only
// `mean` differs.
enum class KvPolicy { per_step, mean, last, first };
KvPolicy parse_kv_policy(const std::string& name);  // UsageError naming the choices
const char* kv_policy_name(KvPolicy p);

}  // namespace looplm

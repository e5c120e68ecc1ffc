// A transformer block kind (SPEC §1.1). Kinds register a factory under their config name
// (`block` key), so a new kind is one file: see blocks_*.cpp and LOOPLM_REGISTER_BLOCK.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/layers.h"

namespace looplm {

class Block {
 public:
  virtual ~Block() = default;
  virtual void bind(ParamStore& ps) = 0;  // create graph views once params exist
  virtual Node* forward(Graph& g, Node* x, const BlockCtx& ctx) const = 0;
  // Params whose init is an output projection (scaled by 1/sqrt(2N), or β under DeepLoop) and
  // those that DeepLoop's β also scales (attn.v and every MLP matrix).
  std::vector<int> output_projections, beta_scaled;
};

using BlockFactory = std::function<std::unique_ptr<Block>(ParamStore&, const std::string& prefix, const Config&)>;
std::map<std::string, BlockFactory>& block_registry();
std::unique_ptr<Block> make_block(ParamStore& ps, const std::string& prefix, const Config& c);

struct BlockRegistrar {
  BlockRegistrar(const std::string& name, BlockFactory f) { block_registry()[name] = std::move(f); }
};
#define LOOPLM_REGISTER_BLOCK(NAME, CLASS)                                                         \
  static ::looplm::BlockRegistrar registrar_##CLASS(NAME, [](::looplm::ParamStore& ps,             \
                                                             const std::string& prefix,            \
                                                             const ::looplm::Config& c) {          \
    return std::unique_ptr<::looplm::Block>(new CLASS(ps, prefix, c));                             \
  })

}  // namespace looplm

#include "model/block.h"

#include "looplm/error.h"

namespace looplm {

std::map<std::string, BlockFactory>& block_registry() {
  static std::map<std::string, BlockFactory> r;
  return r;
}

std::unique_ptr<Block> make_block(ParamStore& ps, const std::string& prefix, const Config& c) {
  auto it = block_registry().find(c.block);
  if (it == block_registry().end()) throw UsageError("unknown block kind '" + c.block + "'");
  return it->second(ps, prefix, c);
}

}  // namespace looplm

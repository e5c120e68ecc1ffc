// CRC-32C (Castagnoli, the iSCSI / ext4 / RocksDB checksum): what a checkpoint manifest records of
// each file it names, so a resume can tell a whole, matching file from a replaced or damaged one.
// Streaming: crc32c(crc32c(0, a), b) == crc32c(0, a + b). SSE4.2's crc32 instruction where the
// CPU has it (about 8 bytes per 3 cycles), a table otherwise; both give the same value.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace looplm::io {

uint32_t crc32c(uint32_t crc, const void* data, size_t n);
std::string crc32c_hex(uint32_t crc);  // "1a2b3c4d"
// The CRC-32C of a whole file (read in chunks, not mapped). Error naming the path.
uint32_t crc32c_file(const std::string& path, uint64_t* bytes = nullptr);

}  // namespace looplm::io

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of every
// .tsr header, table and section. Same value as iSCSI / ext4 / LevelDB's
// crc32c: crc32c("123456789") == 0xE3069283.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera {

// Extends `crc` (the value returned for the bytes before `data`; 0 to start)
// over `size` more bytes. crc32c(b, n2, crc32c(a, n1)) == crc32c(a||b).
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

// The table-driven implementation used when the CPU build lacks SSE4.2;
// exposed so the tests can check that both agree.
uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc = 0);

// True when crc32c() uses the SSE4.2 crc32 instruction.
bool crc32c_is_hardware();

}  // namespace tessera

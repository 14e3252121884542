#ifndef CCRC32C_H
#define CCRC32C_H

#include <stddef.h>
#include <stdint.h>

/// CRC-32C (Castagnoli) of `length` bytes at `bytes`, continuing `crc` (0 to
/// start). The SSE4.2 instruction where the CPU has it, else slicing-by-8.
uint32_t ccrc32c_update(uint32_t crc, const void *bytes, size_t length);

#endif

#include "CCRC32C.h"

#include <pthread.h>
#include <string.h>

// Slicing-by-8 tables, built once (the reflected polynomial 0x82f63b78).
static uint32_t table[8][256];

static void build_tables(void) {
  for (uint32_t n = 0; n < 256; n++) {
    uint32_t c = n;
    for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    table[0][n] = c;
  }
  for (uint32_t n = 0; n < 256; n++) {
    uint32_t c = table[0][n];
    for (int t = 1; t < 8; t++) {
      c = table[0][c & 0xff] ^ (c >> 8);
      table[t][n] = c;
    }
  }
}

static uint32_t software(uint32_t crc, const uint8_t *p, size_t n) {
  while (n >= 8) {
    uint64_t word;
    memcpy(&word, p, 8);  // little-endian hosts only (x86_64, aarch64 Linux)
    word ^= crc;
    crc = table[7][word & 0xff] ^ table[6][(word >> 8) & 0xff] ^ table[5][(word >> 16) & 0xff] ^
          table[4][(word >> 24) & 0xff] ^ table[3][(word >> 32) & 0xff] ^ table[2][(word >> 40) & 0xff] ^
          table[1][(word >> 48) & 0xff] ^ table[0][word >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
#include <nmmintrin.h>

__attribute__((target("sse4.2"))) static uint32_t hardware(uint32_t crc, const uint8_t *p, size_t n) {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t word;
    memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = (uint32_t)c;
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int use_hardware = 0;

static void choose(void) {
  build_tables();
#if defined(__x86_64__)
  __builtin_cpu_init();
  use_hardware = __builtin_cpu_supports("sse4.2");
#endif
}

uint32_t ccrc32c_update(uint32_t crc, const void *bytes, size_t length) {
  pthread_once(&once, choose);
  uint32_t c = ~crc;
#if defined(__x86_64__)
  if (use_hardware) return ~hardware(c, bytes, length);
#endif
  return ~software(c, bytes, length);
}

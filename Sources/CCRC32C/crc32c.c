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

// One crc32 instruction's result feeds the next, so a single chain runs at a
// third of the instruction's throughput: long inputs run three chains side by
// side over three neighbouring stretches and join them by shifting the first
// two over the stretches after them (the register is linear in its start).
#define STRETCH 8192

// Appending STRETCH zero bytes to a register, as four byte-indexed tables.
static uint32_t stretch_shift[4][256];

static void build_shift(void) {
  static const uint8_t zeros[STRETCH];
  uint32_t images[32];
  for (int bit = 0; bit < 32; bit++) images[bit] = software(1u << bit, zeros, STRETCH);
  for (int k = 0; k < 4; k++) {
    for (uint32_t v = 0; v < 256; v++) {
      uint32_t image = 0;
      for (int bit = 0; bit < 8; bit++) {
        if (v & (1u << bit)) image ^= images[8 * k + bit];
      }
      stretch_shift[k][v] = image;
    }
  }
}

static uint32_t shift(uint32_t crc) {
  return stretch_shift[0][crc & 0xff] ^ stretch_shift[1][(crc >> 8) & 0xff] ^
         stretch_shift[2][(crc >> 16) & 0xff] ^ stretch_shift[3][crc >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t hardware(uint32_t crc, const uint8_t *p, size_t n) {
  uint64_t c = crc;
  while (n >= 3 * STRETCH) {
    uint64_t c1 = 0, c2 = 0;
    for (size_t i = 0; i < STRETCH; i += 8) {
      uint64_t w0, w1, w2;
      memcpy(&w0, p + i, 8);
      memcpy(&w1, p + STRETCH + i, 8);
      memcpy(&w2, p + 2 * STRETCH + i, 8);
      c = _mm_crc32_u64(c, w0);
      c1 = _mm_crc32_u64(c1, w1);
      c2 = _mm_crc32_u64(c2, w2);
    }
    c = shift((uint32_t)c) ^ (uint32_t)c1;
    c = shift((uint32_t)c) ^ (uint32_t)c2;
    p += 3 * STRETCH;
    n -= 3 * STRETCH;
  }
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
  if (use_hardware) build_shift();
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

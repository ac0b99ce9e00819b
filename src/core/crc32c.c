/* CRC-32C (see crc32c.h). */
#include "core/crc32c.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

/* Constants once computed: written only inside pthread_once, read after it
 * returned (pthread_once orders the writes before every later read). */
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static uint32_t crc_tables[8][256];
static bool crc_hw;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_tables[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = crc_tables[0][i];
        for (int t = 1; t < 8; t++) {
            c = crc_tables[0][c & 0xff] ^ (c >> 8);
            crc_tables[t][i] = c;
        }
    }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

static inline uint32_t get32le(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint32_t crc32c_tables(uint32_t crc, const uint8_t *p, size_t len)
{
    crc = ~crc;
    while (len > 0 && ((uintptr_t)p & 7) != 0) {
        crc = crc_tables[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        len--;
    }
    while (len >= 8) {
        uint32_t lo = get32le(p) ^ crc;
        uint32_t hi = get32le(p + 4);
        crc = crc_tables[7][lo & 0xff] ^ crc_tables[6][(lo >> 8) & 0xff] ^
              crc_tables[5][(lo >> 16) & 0xff] ^ crc_tables[4][lo >> 24] ^
              crc_tables[3][hi & 0xff] ^ crc_tables[2][(hi >> 8) & 0xff] ^
              crc_tables[1][(hi >> 16) & 0xff] ^ crc_tables[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len > 0) {
        crc = crc_tables[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        len--;
    }
    return ~crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CRC32C_HW 1
/* SSE 4.2 has an instruction for exactly this polynomial. */
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p,
                                                            size_t len)
{
    uint64_t c = ~crc;
    while (len > 0 && ((uintptr_t)p & 7) != 0) {
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
        len--;
    }
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        len -= 8;
    }
    while (len > 0) {
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
        len--;
    }
    return ~(uint32_t)c;
}
#endif

uint32_t crc32c_sw(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&crc_once, crc_init);
    return crc32c_tables(crc, data, len);
}

uint32_t crc32c(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&crc_once, crc_init);
#ifdef CRC32C_HW
    if (crc_hw)
        return crc32c_hw(crc, data, len);
#endif
    return crc32c_tables(crc, data, len);
}

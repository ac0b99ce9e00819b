/* CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78): the
 * checksum of the fileindex files. The SSE 4.2 instruction computes it when
 * the CPU has one, else slicing-by-8 tables.
 *
 * Thread-safe: the tables and the CPU probe are set up once per process
 * (pthread_once) before the first result, so any number of threads may call
 * these at once, from a cold start too. */
#ifndef PETREL_CORE_CRC32C_H
#define PETREL_CORE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continues `crc` over `len` bytes of `data`; start a chain from 0:
 * crc = crc32c(crc32c(0, a, na), b, nb) == crc32c(0, a||b, na + nb). */
uint32_t crc32c(uint32_t crc, const void *data, size_t len);
/* The same result, always through the tables (tests compare both paths,
 * and a CPU without SSE 4.2 takes this one). */
uint32_t crc32c_sw(uint32_t crc, const void *data, size_t len);

#endif

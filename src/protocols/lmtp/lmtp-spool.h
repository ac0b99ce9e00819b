/* Where the bytes of one DATA wait until the message is delivered: in
 * memory up to LMTP_SPOOL_THRESHOLD, then in an unnamed file in
 * `lmtp.temp_dir` (fs_tmpfile_open: no name, so a crash or a dropped
 * connection leaves nothing), so that many clients sending large messages
 * at once cost disk, not memory (as Dovecot's mail_temp_dir). The decoded
 * message (lmtp-data.h) is appended to `mem`; lmtp_spool_settle() moves it
 * to the file once it is large enough. */
#ifndef PETREL_PROTOCOLS_LMTP_LMTP_SPOOL_H
#define PETREL_PROTOCOLS_LMTP_LMTP_SPOOL_H

#include "core/buf.h"
#include "core/error.h"

#include <stdbool.h>
#include <stdint.h>

/* As Dovecot: a smaller message is not worth a file. */
#define LMTP_SPOOL_THRESHOLD (128u * 1024)

struct lmtp_spool {
    size_t threshold; /* LMTP_SPOOL_THRESHOLD (smaller in the fuzzer) */
    size_t write_min; /* bytes gathered per write to the file (64 KiB) */
    struct buf mem;   /* bytes not in the file (yet) */
    int fd;           /* -1 until the message went over the threshold */
    uint64_t filed;   /* bytes in the file */
    bool failed;      /* the file could not be made or written: `err` */
    struct petrel_error err;
};

void lmtp_spool_init(struct lmtp_spool *sp);
/* After bytes were appended to sp->mem: moves them to the file (made in
 * `dir` on first need) once they are over the threshold, or with `final`
 * whenever a file exists (the message is complete: all of it is then in
 * the file, or all in memory). A failure is kept in sp->failed; the bytes
 * are dropped from then on (the transaction answers 451). */
void lmtp_spool_settle(struct lmtp_spool *sp, const char *dir, bool final);
/* Frees the memory and closes the file. */
void lmtp_spool_free(struct lmtp_spool *sp);

#endif

/* The QRESYNC select parameter (RFC 7162 3.2.5):
 *   (QRESYNC (uidvalidity mod-sequence [known-uids [(seq-set uid-set)]]))
 * — the list after the QRESYNC atom, as the parser gives it. Pure grammar,
 * fuzzed with the IMAP parser (fuzz/fuzz-imap-parser.c). */
#ifndef PETREL_PROTOCOLS_IMAP_IMAP_QRESYNC_H
#define PETREL_PROTOCOLS_IMAP_IMAP_QRESYNC_H

#include "protocols/imap/imap-parser.h"
#include "protocols/imap/imap-seqset.h"

#include <stdbool.h>
#include <stdint.h>

struct imap_qresync_param {
    uint32_t uid_validity; /* nz-number */
    uint64_t modseq;       /* 1 .. 2^63-1 */
    bool known_given;
    struct imap_seqset known; /* known-uids ("*" is refused, as RFC 7162 says) */
};

/* Parses `list`; on success *out holds the values (free it with
 * imap_qresync_param_free). The seq-match data, when present, must be two
 * sequence sets of equal size; its values only help a server that keeps
 * expunge history and are not kept. False for anything else (out freed). */
bool imap_qresync_parse(const struct imap_arg *list, struct imap_qresync_param *out);
void imap_qresync_param_free(struct imap_qresync_param *p);

#endif

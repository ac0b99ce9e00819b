/* Postfix's policy delegation protocol (SMTPD_POLICY_README): a request is
 * `name=value` lines, each ended by LF, and an empty line; the answer is
 * `action=<text>` and an empty line. A connection may carry any number of
 * requests, one after another (Postfix waits for each answer; a pipelining
 * client gets the answers in request order).
 *
 * This reader takes one line at a time (as net/line-server hands them over)
 * and keeps only what quota-status uses: `request`, `protocol_state`,
 * `recipient` and `size`; other attributes are counted and dropped. A CR
 * before the LF is tolerated. Limits: `max_bytes` for all lines of one
 * request together, POLICY_MAX_ATTRS attributes, POLICY_MAX_VALUE bytes of
 * a kept value. A line without '=' or an empty name, or a limit exceeded,
 * is a protocol error: the caller closes the connection (Postfix then
 * logs the policy service as failed and applies its default). */
#ifndef PETREL_SERVICES_QUOTA_STATUS_POLICY_REQUEST_H
#define PETREL_SERVICES_QUOTA_STATUS_POLICY_REQUEST_H

#include "core/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define POLICY_MAX_ATTRS 256
#define POLICY_MAX_VALUE 1024

struct policy_request {
    char *request;        /* "smtpd_access_policy" for Postfix */
    char *protocol_state; /* "RCPT", "END-OF-MESSAGE", ... */
    char *recipient;      /* NULL when absent or empty */
    uint64_t size;        /* size= as sent (0 = unknown or not a number) */
    size_t attrs;
    size_t bytes;
};

enum policy_line {
    POLICY_MORE,  /* an attribute was taken: more lines follow */
    POLICY_DONE,  /* the empty line: the request is complete */
    POLICY_ERROR, /* protocol error (message in err): close the connection */
};

void policy_request_init(struct policy_request *r);
/* Frees the kept values and makes `r` empty for the next request. */
void policy_request_reset(struct policy_request *r);
/* Feeds one line without its LF. */
enum policy_line policy_request_line(struct policy_request *r, const char *line, size_t len,
                                     size_t max_bytes, struct petrel_error *err);

#endif

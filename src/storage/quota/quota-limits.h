/* The effective limits of a user (document 3):
 *
 *   storage  = rule x quota_storage_percentage / 100 + quota_storage_extra
 *              (+ quota_storage_grace on inbound delivery only)
 *   messages = rule x quota_message_percentage / 100
 *
 * where `rule` is the user's `*` rule adjusted by a matching mailbox rule
 * (quota-rule.h). A rule of 0 is unlimited and stays unlimited: extra and
 * grace never limit an unlimited user. Scaling never turns a limit into 0
 * (it is at least 1). The scaled limit without grace is what GETQUOTA
 * reports and what IMAP enforces; LMTP/LDA and quota-status add the grace.
 * Pure functions over their arguments; thread-safe. */
#ifndef PETREL_STORAGE_QUOTA_LIMITS_H
#define PETREL_STORAGE_QUOTA_LIMITS_H

#include "storage/quota/quota-config.h"
#include "storage/quota/quota-rule.h"

#include <stdbool.h>
#include <stdint.h>

enum quota_point {
    QUOTA_POINT_INTERACTIVE, /* IMAP APPEND/COPY/MOVE, GETQUOTA */
    QUOTA_POINT_DELIVERY,    /* LMTP, LDA, quota-status: grace applies */
};

struct quota_limits {
    uint64_t storage;  /* bytes; 0 = unlimited */
    uint64_t messages; /* 0 = unlimited */
};

struct quota_usage {
    uint64_t storage; /* bytes */
    uint64_t messages;
};

enum quota_verdict {
    QUOTA_OK,
    QUOTA_OVER_STORAGE,
    QUOTA_OVER_MESSAGES,
    QUOTA_TOO_LARGE, /* one message above quota_mail_size */
};

/* Limits for saving into `mailbox` (NULL: the user as a whole). */
void quota_limits_compute(const struct quota_config *cfg, const struct quota_rules *rules,
                          const char *mailbox, enum quota_point point, struct quota_limits *out);

/* Whether `add_bytes`/`add_messages` more fit on top of `usage`: over when
 * usage + add exceeds a limit. With add_bytes 0 (size unknown, as a policy
 * request without size=) a user already at or above the storage limit is
 * over: no message of at least one byte fits. quota_mail_size (cfg) is
 * checked first and regardless of usage. */
enum quota_verdict quota_check(const struct quota_config *cfg, const struct quota_limits *limits,
                               const struct quota_usage *usage, uint64_t add_bytes,
                               uint64_t add_messages);

#endif

/* Quota rules: a user's `quota_rule`, `quota_rule2`, ... userdb fields
 * (document 3, docs/quota.md) parsed into limits.
 *
 * Grammar of one field: a comma-separated list of rules, each
 *   [<mailbox>:]<resource>=<limit>[:<resource>=<limit>...]   or   <mailbox>:ignore
 * mailbox   `*` (every mailbox; the default when left out) or a mailbox
 *           name, which may hold `*` and `?` wildcards (INBOX in any case);
 * resource  `storage` (bytes; `bytes` is accepted as a synonym) or
 *           `messages` (a count);
 * limit     a decimal integer with an optional unit K, M, G or T (1024-based,
 *           any case, an optional trailing B); 0 means unlimited. For a
 *           named mailbox (not `*`) it may also be `+N`/`-N` (relative to
 *           the `*` rule) or `N%` (a percentage of the `*` rule), as in
 *           Dovecot's quota_rule2 = Trash:storage=+100M.
 * Later rules replace earlier ones for the same mailbox and resource, so
 * the last `*:storage=` wins. A plain integer for storage is bytes (in
 * Dovecot it is kilobytes: docs/quota.md says so).
 *
 * Parsing never allocates more than QUOTA_MAX_RULES mailbox rules and stops
 * at the first error with a message naming the rule. Not thread-shared:
 * a parsed set belongs to its caller. */
#ifndef PETREL_STORAGE_QUOTA_RULE_H
#define PETREL_STORAGE_QUOTA_RULE_H

#include "core/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define QUOTA_MAX_RULES 64       /* mailbox rules per user */
#define QUOTA_MAX_RULE_TEXT 4096 /* bytes of one userdb field */

enum quota_resource {
    QUOTA_RES_STORAGE,
    QUOTA_RES_MESSAGES,
    QUOTA_RES_COUNT,
};

enum quota_limit_kind {
    QUOTA_LIMIT_UNSET,
    QUOTA_LIMIT_ABSOLUTE, /* value */
    QUOTA_LIMIT_PLUS,     /* `*` rule + value */
    QUOTA_LIMIT_MINUS,    /* `*` rule - value (not below 1) */
    QUOTA_LIMIT_PERCENT,  /* `*` rule * value / 100 */
};

struct quota_limit_spec {
    enum quota_limit_kind kind;
    uint64_t value;
};

struct quota_mailbox_rule {
    char *pattern; /* mailbox name, may hold * and ? */
    bool ignore;   /* the mailbox does not count toward usage */
    struct quota_limit_spec limit[QUOTA_RES_COUNT];
};

struct quota_rules {
    uint64_t limit[QUOTA_RES_COUNT]; /* the `*` rules; 0 = unlimited */
    struct quota_mailbox_rule *boxes;
    size_t box_count;
};

/* "50M" -> 52428800. Digits with an optional K/M/G/T unit (any case,
 * optional trailing B, or a lone B). False on anything else or overflow. */
bool quota_size_parse(const char *text, size_t len, uint64_t *out);

/* An empty set (every limit unlimited). */
void quota_rules_init(struct quota_rules *r);
void quota_rules_free(struct quota_rules *r);
/* Adds the rules of one userdb field on top of what `r` holds. On error
 * (INVALID, message names the rule) `r` keeps the rules before the bad
 * one; callers treat the user as unreadable rather than unlimited. */
bool quota_rules_add(struct quota_rules *r, const char *text, struct petrel_error *err);
/* quota_rules_add over a NULL-terminated list of fields (the userdb's
 * quota_rule, quota_rule2, ... in order). */
bool quota_rules_add_list(struct quota_rules *r, char *const *fields, struct petrel_error *err);
/* quota_rules_add over the lines of `text` (fields joined by '\n', as
 * quota_user_rules_copy gives them); empty lines are skipped. */
bool quota_rules_add_lines(struct quota_rules *r, const char *text, struct petrel_error *err);

/* True when `mailbox` is marked ignore by the last rule matching it. */
bool quota_rules_mailbox_ignored(const struct quota_rules *r, const char *mailbox);
/* The limit of `res` when saving into `mailbox` (NULL: the user's limit):
 * the `*` rule, adjusted by the last matching mailbox rule that sets `res`.
 * 0 = unlimited; a relative or percentage rule over an unlimited `*` rule
 * stays unlimited. */
uint64_t quota_rules_limit(const struct quota_rules *r, enum quota_resource res,
                           const char *mailbox);

/* `*` and `?` glob match; "INBOX" compares case-insensitively. */
bool quota_mailbox_match(const char *pattern, const char *mailbox);

#endif

/* The quota as a storage module (document 3, docs/quota.md): enforcement
 * on the save hooks for every front end, warnings at each crossing, the
 * over-flag sync at IMAP login, and the per-user report GETQUOTA answers.
 *
 * Registered once at start-up on the process's storage (siblings take it)
 * when `quota.enabled`, `imap.imap_quota` or the over-flag sync is on; with
 * the engine off it
 * registers without hooks, so only the report works. Front ends find it by
 * name (mail_storage_module_ctx(storage, QUOTA_MODULE_NAME)).
 *
 * A user's limits are the userdb's quota_rule fields, which a front end
 * hands to quota_user_set() when it has them (IMAP and POP3 at login, LMTP
 * per delivery, the API's mail/append per request). A user with none set
 * is not limited by the rules (the site-wide caps quota_mail_size,
 * quota_mailbox_count and quota_mailbox_message_count still apply).
 * Besides `save`, the module answers the storage's test allocation
 * (mail_save_test: IMAP asks it before an APPEND literal's continuation)
 * without reserving anything.
 *
 * Concurrency: each save reads the user's usage from the index, then,
 * under the module's lock, checks it plus what other saves of the same
 * user hold reserved (said yes to, not yet committed) plus what they
 * committed since the read began, and reserves its own size until
 * saved/save_aborted. So concurrent sessions of one user in this process
 * never together pass the limit; the one-message slack document 3 allows
 * is for a writer in another process (docs/decisions.md). */
#ifndef PETREL_STORAGE_QUOTA_MODULE_H
#define PETREL_STORAGE_QUOTA_MODULE_H

#include "core/error.h"
#include "core/metrics.h"
#include "storage/mail-storage.h"
#include "storage/quota/quota-config.h"
#include "storage/quota/quota-limits.h"

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>

#define QUOTA_MODULE_NAME "quota"

struct quota_module;
struct quota_user;

/* `cfg`, `base` (the process's loop, where programs are started and
 * watched) and `metrics` are borrowed and outlive the module. */
struct quota_module *quota_module_new(const struct quota_config *cfg, struct event_base *base,
                                      struct metrics_registry *metrics);
/* Adds the module to `storage` (start-up only, see mail-storage-module.h). */
bool quota_module_register(struct quota_module *qm, struct mail_storage *storage,
                           struct petrel_error *err);
/* After every storage that has it is freed; kills programs still running. */
void quota_module_free(struct quota_module *qm);

/* Whether `storage` has the module with the engine on (quota.enabled):
 * a front end that only delivers (LMTP) keeps the userdb's quota_rule for
 * nothing otherwise. */
bool quota_storage_enforces(const struct mail_storage *storage);
/* Sets the user's rules (the userdb's quota_rule, quota_rule2, ...,
 * NULL-terminated; NULL or empty: unlimited). A rule that does not parse
 * is logged and leaves the user unenforced (fail open), as a transient
 * usage error does. No-op without the module. */
void quota_user_set(struct mail_user *user, char *const *rule_fields);
/* Whether saves of `user` are checked against rules (the module is there
 * with quota.enabled on): a front end that does not ask the userdb for
 * every save (the API's mail/append) asks it only then. */
bool quota_user_enforced(struct mail_user *user);
/* An IMAP login: the rules as quota_user_set, and the over-flag sync with
 * the userdb's quota_over_flag (NULL: unset): checked now, or at the first
 * quota operation with quota_over_status_lazy_check, once per login and
 * only within 10 s of it. */
void quota_user_login(struct mail_user *user, char *const *rule_fields, const char *over_flag);
/* The module's view of the user's rules on this handle, for a reader on
 * another thread (the mirror): the fields quota_user_set last got, one per
 * line (quota_rules_add_lines parses them), as a fresh string the caller
 * frees. NULL without the module or when none were set on this handle. */
char *quota_user_rules_copy(const struct mail_user *user);
/* Frees the user's quota state (mail-storage.c, with the user). */
void quota_user_free(struct quota_user *qu);

/* What GETQUOTA/GETQUOTAROOT show for a user. */
struct quota_report {
    const char *name;           /* quota_name (borrowed from the configuration) */
    bool hidden;                /* quota_hidden, or quota_ignore_unlimited for an unlimited user */
    struct quota_limits limits; /* scaled, without grace; 0 = unlimited */
    struct quota_usage usage;
};
/* False when the module is absent (NOT_FOUND), a rule is bad (INVALID) or
 * usage cannot be read. */
bool quota_user_report(struct mail_user *user, struct quota_report *out, struct petrel_error *err);

#endif

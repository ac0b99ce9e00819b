/* From a policy request's `recipient=` to the userdb name and the detail
 * (the folder part, "alice+lists@example.org" -> "lists"), the way LMTP
 * does it (protocols/lmtp/lmtp-recipient.h), so a recipient is the same
 * user at quota-status and at delivery: the local part is split at the first
 * character of `delimiters` that is not its first character; an empty
 * detail is none; the lookup name is `format` with %u = the address without
 * its detail (the local part alone when there is no '@'), %n = the local
 * part without the detail, %d = the domain, %% = '%'. Domains are lower-cased. */
#ifndef PETREL_SERVICES_QUOTA_STATUS_POLICY_RECIPIENT_H
#define PETREL_SERVICES_QUOTA_STATUS_POLICY_RECIPIENT_H

#include <stdbool.h>

struct policy_recipient {
    char *lookup; /* the userdb name */
    char *detail; /* NULL when none */
};

/* Fills `out` (fresh allocations; free with policy_recipient_free). False
 * for an address with an empty local part. */
bool policy_recipient_parse(const char *address, const char *delimiters, const char *format,
                            struct policy_recipient *out);
void policy_recipient_free(struct policy_recipient *r);

#endif

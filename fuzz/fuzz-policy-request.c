/* libFuzzer target: Postfix's policy delegation protocol as quota-status
 * reads it (services/quota-status/policy-request.h) and the recipient
 * mapping (policy-recipient.h). Input: a byte stream split at '\n' into
 * lines, fed one by one as net/line-server hands them over (lines longer
 * than the service's 4096-byte default are what the line server refuses,
 * so they are skipped here).
 *   - every line is taken (MORE), ends a request (DONE) or is an error
 *     with a message, after which the request is reset (the connection
 *     would close);
 *   - a kept value never exceeds POLICY_MAX_VALUE bytes, holds no NUL, and
 *     a request never holds more than max_bytes of lines or
 *     POLICY_MAX_ATTRS attributes;
 *   - the recipient of a complete request maps to a lookup name without
 *     a detail delimiter being lost: lookup + detail account for the
 *     local part. */
#include "services/quota-status/policy-recipient.h"
#include "services/quota-status/policy-request.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_LINE 4096
#define MAX_BYTES 8192

static void check_recipient(const char *rcpt)
{
    struct policy_recipient r;
    static const char *const formats[] = {"%u", "%n", "%d", "%n@%d%%", NULL};
    for (size_t i = 0; formats[i] != NULL; i++) {
        if (!policy_recipient_parse(rcpt, "+-", formats[i], &r)) {
            assert(rcpt[0] == '@' || rcpt[0] == '\0');
            continue;
        }
        assert(r.lookup != NULL);
        if (r.detail != NULL)
            assert(r.detail[0] != '\0' && strstr(rcpt, r.detail) != NULL);
        if (i == 1) { /* %n: the local part up to the delimiter */
            assert(strncmp(r.lookup, rcpt, strlen(r.lookup)) == 0);
            assert(strchr(r.lookup, '@') == NULL || strrchr(rcpt, '@') != strchr(rcpt, '@'));
        }
        policy_recipient_free(&r);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct policy_request req;
    policy_request_init(&req);
    size_t pos = 0;
    while (pos < size) {
        const uint8_t *nl = memchr(data + pos, '\n', size - pos);
        size_t len = nl != NULL ? (size_t)(nl - (data + pos)) : size - pos;
        if (len <= MAX_LINE) {
            char *line = malloc(len + 1);
            memcpy(line, data + pos, len);
            line[len] = '\0';
            struct petrel_error err;
            memset(&err, 0, sizeof(err));
            enum policy_line r = policy_request_line(&req, line, len, MAX_BYTES, &err);
            assert(req.bytes <= MAX_BYTES || r == POLICY_ERROR);
            assert(req.attrs <= POLICY_MAX_ATTRS || r == POLICY_ERROR);
            if (req.recipient != NULL)
                assert(strlen(req.recipient) <= POLICY_MAX_VALUE && req.recipient[0] != '\0');
            if (r == POLICY_ERROR) {
                assert(err.message[0] != '\0');
                policy_request_reset(&req);
            } else if (r == POLICY_DONE) {
                if (req.recipient != NULL)
                    check_recipient(req.recipient);
                policy_request_reset(&req);
                assert(req.recipient == NULL && req.bytes == 0 && req.size == 0);
            }
            free(line);
        }
        pos += len + (nl != NULL ? 1 : 0);
    }
    policy_request_reset(&req);
    return 0;
}

/* Recipient -> userdb name and detail (policy-recipient.h). */
#include "services/quota-status/policy-recipient.h"

#include "core/buf.h"
#include "core/xalloc.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

bool policy_recipient_parse(const char *address, const char *delimiters, const char *format,
                            struct policy_recipient *out)
{
    out->lookup = NULL;
    out->detail = NULL;
    const char *at = strrchr(address, '@');
    size_t local_len = at != NULL ? (size_t)(at - address) : strlen(address);
    if (local_len == 0)
        return false;
    size_t name_len = local_len;
    for (size_t i = 1; i < local_len && delimiters != NULL && delimiters[0] != '\0'; i++) {
        if (strchr(delimiters, address[i]) != NULL) {
            name_len = i;
            break;
        }
    }
    if (name_len + 1 < local_len)
        out->detail = xstrndup(address + name_len + 1, local_len - name_len - 1);
    char *domain = xstrdup(at != NULL ? at + 1 : "");
    for (char *p = domain; *p != '\0'; p++)
        *p = (char)tolower((unsigned char)*p);
    struct buf b = {0};
    for (const char *p = format; *p != '\0'; p++) {
        if (*p != '%' || p[1] == '\0') {
            buf_append(&b, p, 1);
            continue;
        }
        p++;
        if (*p == 'u') {
            buf_append(&b, address, name_len);
            if (at != NULL) {
                buf_append(&b, "@", 1);
                buf_append(&b, domain, strlen(domain));
            }
        } else if (*p == 'n') {
            buf_append(&b, address, name_len);
        } else if (*p == 'd') {
            buf_append(&b, domain, strlen(domain));
        } else {
            buf_append(&b, p, 1);
        }
    }
    out->lookup = xstrdup(buf_cstr(&b));
    buf_free(&b);
    free(domain);
    return true;
}

void policy_recipient_free(struct policy_recipient *r)
{
    free(r->lookup);
    free(r->detail);
    r->lookup = NULL;
    r->detail = NULL;
}

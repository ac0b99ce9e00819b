/* Recipient addresses -> userdb name and detail (see lmtp-recipient.h). */
#include "protocols/lmtp/lmtp-recipient.h"

#include "core/buf.h"
#include "core/xalloc.h"

#include <stdlib.h>
#include <string.h>

static void append_lower(struct buf *out, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        buf_append_char(out, c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c);
    }
}

void lmtp_recipient_name_make(const struct lmtp_path *path, const char *delimiters,
                              const char *username_format, struct lmtp_recipient_name *out)
{
    memset(out, 0, sizeof(*out));
    struct buf text = {0};
    lmtp_path_format(path, &text);
    out->address = buf_steal(&text);

    const char *local = path->local.ptr;
    size_t user_len = path->local.len;
    for (size_t i = 1; i < path->local.len && delimiters != NULL; i++) {
        if (local[i] != '\0' && strchr(delimiters, local[i]) != NULL) {
            user_len = i;
            if (i + 1 < path->local.len)
                out->detail = xstrndup(local + i + 1, path->local.len - i - 1);
            break;
        }
    }
    struct buf name = {0};
    for (const char *p = username_format; *p != '\0'; p++) {
        if (*p != '%') {
            buf_append_char(&name, *p);
            continue;
        }
        p++;
        if (*p == 'u' || *p == 'n') {
            buf_append(&name, local, user_len);
            if (*p == 'u' && path->domain.len > 0) {
                buf_append_char(&name, '@');
                append_lower(&name, path->domain.ptr, path->domain.len);
            }
        } else if (*p == 'd') {
            append_lower(&name, path->domain.ptr, path->domain.len);
        } else if (*p == '%') {
            buf_append_char(&name, '%');
        } else if (*p == '\0') {
            break; /* the configuration check refuses this */
        }
    }
    out->lookup = buf_steal(&name);
}

void lmtp_recipient_name_free(struct lmtp_recipient_name *name)
{
    free(name->address);
    free(name->lookup);
    free(name->detail);
    memset(name, 0, sizeof(*name));
}

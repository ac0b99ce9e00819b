/* dovecot-acl files (see acl-file.h). */
#include "storage/acl/acl-file.h"

#include <stdio.h>
#include <string.h>

static bool is_space(char c)
{
    return c == ' ' || c == '\t';
}

/* Parses the rights part of a line. */
static bool parse_rights(const char *p, const char *end, uint32_t *rights, const char **why)
{
    uint32_t r = 0;
    bool any = false;
    while (p < end) {
        while (p < end && is_space(*p))
            p++;
        if (p == end)
            break;
        const char *tok = p;
        while (p < end && !is_space(*p))
            p++;
        size_t tlen = (size_t)(p - tok);
        any = true;
        if (tok[0] == ':') {
            uint32_t bit = acl_right_from_name(tok + 1, tlen - 1);
            if (bit == 0) {
                *why = "unknown right name";
                return false;
            }
            r |= bit;
            continue;
        }
        uint32_t letters;
        char bad;
        if (!acl_rights_parse(tok, tlen, &letters, &bad)) {
            *why = "unknown right letter";
            return false;
        }
        r |= letters;
    }
    if (!any) {
        *why = "no rights after the identifier";
        return false;
    }
    *rights = r;
    return true;
}

bool acl_file_parse(const char *data, size_t len, struct acl_list *list, char *why,
                    size_t why_size)
{
    acl_list_clear(list);
    if (len == 0) /* data may be NULL */
        return true;
    const char *p = data, *end = data + len;
    unsigned line_no = 0;
    while (p < end) {
        line_no++;
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = nl != NULL ? nl : end;
        const char *next = nl != NULL ? nl + 1 : end;
        if (line_end > p && line_end[-1] == '\r')
            line_end--;
        const char *q = p;
        while (q < line_end && is_space(*q))
            q++;
        if (q == line_end || *q == '#') {
            p = next;
            continue;
        }
        const char *msg = NULL;
        if (memchr(q, '\0', (size_t)(line_end - q)) != NULL) {
            msg = "a NUL byte";
        } else {
            const char *id_end = q;
            while (id_end < line_end && !is_space(*id_end))
                id_end++;
            struct acl_id id;
            uint32_t rights = 0;
            if (acl_id_parse(q, (size_t)(id_end - q), &id, &msg) &&
                parse_rights(id_end, line_end, &rights, &msg)) {
                if (rights != 0)
                    (void)acl_list_modify(list, &id, rights, ACL_MODIFY_ADD);
                p = next;
                continue;
            }
        }
        snprintf(why, why_size, "line %u: %s", line_no, msg);
        acl_list_clear(list);
        return false;
    }
    return true;
}

void acl_file_format(const struct acl_list *list, struct buf *out)
{
    for (size_t i = 0; i < list->count; i++) {
        acl_id_format(&list->entries[i].id, out);
        buf_append_char(out, ' ');
        acl_rights_format(list->entries[i].rights, false, out);
        buf_append_char(out, '\n');
    }
}

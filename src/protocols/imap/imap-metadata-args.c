/* GETMETADATA / SETMETADATA arguments (imap-metadata-args.h). */
#include "protocols/imap/imap-metadata-args.h"

#include "core/slice.h"
#include "core/xalloc.h"

#include <stdlib.h>
#include <string.h>

static bool is_string(const struct imap_arg *a)
{
    return a->type == IMAP_ARG_ATOM || a->type == IMAP_ARG_QUOTED || a->type == IMAP_ARG_LITERAL;
}

/* An entry name argument (astring; a literal is fine, NUL bytes are not). */
static bool parse_entry(const struct imap_arg *a, bool bare_ok, struct metadata_entry *e,
                        const char **why)
{
    if (!is_string(a) || a->str == NULL) {
        *why = "Entry name expected";
        return false;
    }
    if (strlen(a->str) != a->len) {
        *why = "Entry name must be printable ASCII";
        return false;
    }
    return metadata_entry_parse(a->str, a->len, bare_ok, e, why);
}

static bool parse_options(const struct imap_arg *list, struct imap_getmetadata_args *out,
                          const char **why)
{
    bool have_depth = false, have_maxsize = false;
    if (list->count == 0) {
        *why = "Empty GETMETADATA option list";
        return false;
    }
    for (size_t i = 0; i < list->count; i += 2) {
        const struct imap_arg *name = &list->list[i];
        if (i + 1 >= list->count || list->list[i + 1].type != IMAP_ARG_ATOM) {
            *why = "Option value missing";
            return false;
        }
        const struct imap_arg *v = &list->list[i + 1];
        if (imap_arg_atom_equals(name, "MAXSIZE") && !have_maxsize) {
            uint64_t n;
            if (!slice_parse_u64((struct slice){.ptr = v->str, .len = v->len}, UINT32_MAX, &n)) {
                *why = "Invalid MAXSIZE value";
                return false;
            }
            out->maxsize = n;
            have_maxsize = true;
        } else if (imap_arg_atom_equals(name, "DEPTH") && !have_depth) {
            if (imap_arg_atom_equals(v, "0"))
                out->depth = 0;
            else if (imap_arg_atom_equals(v, "1"))
                out->depth = 1;
            else if (imap_arg_atom_equals(v, "infinity"))
                out->depth = -1;
            else {
                *why = "Invalid DEPTH value";
                return false;
            }
            have_depth = true;
        } else {
            *why = "Unknown or repeated GETMETADATA option";
            return false;
        }
    }
    return true;
}

bool imap_getmetadata_parse(const struct imap_arg *args, size_t argc,
                            struct imap_getmetadata_args *out, const char **why)
{
    memset(out, 0, sizeof(*out));
    out->maxsize = UINT64_MAX;
    const struct imap_arg *rest[2];
    const struct imap_arg *options = NULL;
    if (argc == 3 && args[0].type == IMAP_ARG_LIST) {
        options = &args[0];
        rest[0] = &args[1];
        rest[1] = &args[2];
    } else if (argc == 3 && args[1].type == IMAP_ARG_LIST) {
        rest[0] = &args[0];
        options = &args[1];
        rest[1] = &args[2];
    } else if (argc == 2) {
        rest[0] = &args[0];
        rest[1] = &args[1];
    } else {
        *why = "GETMETADATA takes [options] mailbox entries";
        return false;
    }
    if (options != NULL && !parse_options(options, out, why))
        return false;
    if (!is_string(rest[0]) || rest[0]->str == NULL) {
        *why = "Mailbox name expected";
        return false;
    }
    out->mailbox = rest[0];
    const struct imap_arg *entries = rest[1];
    size_t count = entries->type == IMAP_ARG_LIST ? entries->count : 1;
    if (count == 0) {
        *why = "Entry name expected";
        return false;
    }
    if (count > IMAP_METADATA_MAX_ENTRIES) {
        *why = "Too many entries";
        return false;
    }
    out->entries = xcalloc(count, sizeof(*out->entries));
    for (size_t i = 0; i < count; i++) {
        const struct imap_arg *a = entries->type == IMAP_ARG_LIST ? &entries->list[i] : entries;
        if (!parse_entry(a, true, &out->entries[i], why)) {
            imap_getmetadata_args_free(out);
            return false;
        }
    }
    out->count = count;
    return true;
}

void imap_getmetadata_args_free(struct imap_getmetadata_args *a)
{
    free(a->entries);
    a->entries = NULL;
    a->count = 0;
}

bool imap_setmetadata_parse(const struct imap_arg *args, size_t argc,
                            struct imap_setmetadata_args *out, const char **why)
{
    memset(out, 0, sizeof(*out));
    if (argc != 2 || !is_string(&args[0]) || args[0].str == NULL || args[1].type != IMAP_ARG_LIST) {
        *why = "SETMETADATA takes a mailbox and a list of entries and values";
        return false;
    }
    const struct imap_arg *list = &args[1];
    if (list->count == 0 || list->count % 2 != 0) {
        *why = "Entry and value pairs expected";
        return false;
    }
    size_t count = list->count / 2;
    if (count > IMAP_METADATA_MAX_ENTRIES) {
        *why = "Too many entries";
        return false;
    }
    out->mailbox = &args[0];
    out->sets = xcalloc(count, sizeof(*out->sets));
    for (size_t i = 0; i < count; i++) {
        struct imap_metadata_set *s = &out->sets[i];
        const struct imap_arg *name = &list->list[2 * i];
        const struct imap_arg *value = &list->list[2 * i + 1];
        if (!parse_entry(name, false, &s->entry, why)) {
            imap_setmetadata_args_free(out);
            return false;
        }
        if (value->type == IMAP_ARG_NIL) {
            s->value = NULL;
        } else if (value->type == IMAP_ARG_QUOTED || value->type == IMAP_ARG_LITERAL) {
            s->value = value->str;
            s->len = value->len;
            s->too_big_for_memory = value->str == NULL;
        } else {
            *why = "Value must be a string, a literal or NIL";
            imap_setmetadata_args_free(out);
            return false;
        }
    }
    out->count = count;
    return true;
}

void imap_setmetadata_args_free(struct imap_setmetadata_args *a)
{
    free(a->sets);
    a->sets = NULL;
    a->count = 0;
}

/* libFuzzer target: the GETMETADATA / SETMETADATA grammar
 * (protocols/imap/imap-metadata-args.h) on whatever the IMAP parser makes
 * of a client's bytes.
 * Input: the bytes a client sent (any number of commands); each command the
 * parser completes goes through both argument parsers, whatever its name.
 * Invariants: a parse either succeeds or gives a reason; GETMETADATA's depth
 * is 0, 1 or infinity, it names 1 to IMAP_METADATA_MAX_ENTRIES entries, each
 * a valid name (the bare scope allowed) that formats and parses back to the
 * same entry; SETMETADATA names entries below a scope with values that point
 * into the command's own arguments (NIL: none), at most the same limit. */
#include "core/buf.h"
#include "protocols/imap/imap-metadata-args.h"
#include "protocols/imap/imap-parser.h"
#include "storage/metadata/metadata-entry.h"

#include <assert.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_entry(const struct metadata_entry *e, bool bare_ok)
{
    struct buf name = {0};
    metadata_entry_format(e, &name);
    struct metadata_entry again;
    const char *why = NULL;
    assert(metadata_entry_parse(name.data, name.len, bare_ok, &again, &why));
    assert(again.scope == e->scope && strcmp(again.path, e->path) == 0);
    assert(bare_ok || e->path[0] != '\0');
    buf_free(&name);
}

/* Whether [p, p+len) lies inside the bytes of some argument of the tree. */
static bool inside_args(const struct imap_arg *args, size_t count, const char *p, size_t len)
{
    for (size_t i = 0; i < count; i++) {
        const struct imap_arg *a = &args[i];
        if (a->type == IMAP_ARG_LIST) {
            if (inside_args(a->list, a->count, p, len))
                return true;
        } else if (a->str != NULL && p >= a->str && p + len <= a->str + a->len) {
            return true;
        }
    }
    return false;
}

static void run(const struct imap_command *cmd)
{
    struct imap_getmetadata_args g;
    const char *why = NULL;
    if (imap_getmetadata_parse(cmd->args, cmd->arg_count, &g, &why)) {
        assert(g.depth == 0 || g.depth == 1 || g.depth == -1);
        assert(g.count >= 1 && g.count <= IMAP_METADATA_MAX_ENTRIES);
        assert(g.mailbox != NULL && g.mailbox->str != NULL);
        for (size_t i = 0; i < g.count; i++)
            check_entry(&g.entries[i], true);
        imap_getmetadata_args_free(&g);
    } else {
        assert(why != NULL);
    }
    struct imap_setmetadata_args s;
    why = NULL;
    if (imap_setmetadata_parse(cmd->args, cmd->arg_count, &s, &why)) {
        assert(s.count >= 1 && s.count <= IMAP_METADATA_MAX_ENTRIES);
        for (size_t i = 0; i < s.count; i++) {
            check_entry(&s.sets[i].entry, false);
            if (s.sets[i].value != NULL)
                assert(inside_args(cmd->args, cmd->arg_count, s.sets[i].value, s.sets[i].len));
        }
        imap_setmetadata_args_free(&s);
    } else {
        assert(why != NULL);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct imap_parser_limits limits;
    imap_parser_limits_default(&limits);
    limits.max_line = 8192;
    limits.max_literal = 65536;
    struct imap_parser *p = imap_parser_new(&limits);
    size_t off = 0;
    while (off < size) {
        size_t used = 0;
        enum imap_parse_result r = imap_parser_parse_all(p, data + off, size - off, &used);
        if (r == IMAP_PARSE_COMMAND)
            run(imap_parser_command(p));
        if (r == IMAP_PARSE_NEED_MORE || used == 0)
            break;
        if (r == IMAP_PARSE_ERROR && imap_parser_error(p)->fatal)
            break;
        off += used;
    }
    imap_parser_free(p);
    return 0;
}

/* The QRESYNC select parameter (see imap-qresync.h). */
#include "protocols/imap/imap-qresync.h"

#include "core/slice.h"

#include <string.h>

/* A decimal number 1 .. max, as an atom. */
static bool parse_number(const struct imap_arg *a, uint64_t max, uint64_t *out)
{
    return a->type == IMAP_ARG_ATOM && a->len <= 20 &&
           slice_parse_u64((struct slice){a->str, a->len}, max, out) && *out > 0;
}

/* RFC 7162 3.2.5: known-uids and the seq-match sets are sequence-sets
 * without "*" (the client names what it knows); Dovecot refuses it too. */
static bool parse_set(const struct imap_arg *a, struct imap_seqset *set)
{
    struct petrel_error err;
    return a->type == IMAP_ARG_ATOM && memchr(a->str, '*', a->len) == NULL &&
           imap_seqset_parse(a->str, a->len, UINT32_MAX, 0, set, &err);
}

static bool parse_seq_match(const struct imap_arg *m)
{
    if (m->type != IMAP_ARG_LIST || m->count != 2)
        return false;
    struct imap_seqset seqs = {0}, uids = {0};
    bool ok = parse_set(&m->list[0], &seqs) && parse_set(&m->list[1], &uids) &&
              imap_seqset_count(&seqs) == imap_seqset_count(&uids);
    imap_seqset_free(&seqs);
    imap_seqset_free(&uids);
    return ok;
}

bool imap_qresync_parse(const struct imap_arg *list, struct imap_qresync_param *out)
{
    memset(out, 0, sizeof(*out));
    if (list->type != IMAP_ARG_LIST || list->count < 2 || list->count > 4)
        return false;
    uint64_t v = 0;
    bool ok = parse_number(&list->list[0], UINT32_MAX, &v) &&
              parse_number(&list->list[1], INT64_MAX, &out->modseq);
    out->uid_validity = (uint32_t)v;
    size_t i = 2;
    if (ok && i < list->count && list->list[i].type == IMAP_ARG_ATOM) {
        ok = parse_set(&list->list[i], &out->known);
        out->known_given = ok;
        i++;
    }
    if (ok && i < list->count)
        ok = parse_seq_match(&list->list[i++]);
    if (!ok || i != list->count) {
        imap_qresync_param_free(out);
        return false;
    }
    return true;
}

void imap_qresync_param_free(struct imap_qresync_param *p)
{
    imap_seqset_free(&p->known);
    p->known_given = false;
}

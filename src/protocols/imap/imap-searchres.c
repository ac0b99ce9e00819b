/* SEARCHRES (RFC 5182): the saved search result "$", kept per session as
 * UIDs for the selected folder (see imap-private.h). */
#include "protocols/imap/imap-private.h"

#include "protocols/imap/imap-search.h"

void imap_searchres_clear(struct imap_session *s)
{
    imap_seqset_free(&s->searchres);
}

void imap_searchres_save(struct imap_session *s, unsigned return_options, const uint32_t *uids,
                         size_t count)
{
    imap_searchres_clear(s);
    unsigned others = return_options & (IMAP_SEARCH_RETURN_ALL | IMAP_SEARCH_RETURN_COUNT);
    unsigned minmax = return_options & (IMAP_SEARCH_RETURN_MIN | IMAP_SEARCH_RETURN_MAX);
    if (count == 0)
        return;
    if (others == 0 && minmax != 0) {
        if (minmax & IMAP_SEARCH_RETURN_MIN)
            imap_seqset_add(&s->searchres, uids[0], uids[0]);
        if (minmax & IMAP_SEARCH_RETURN_MAX)
            imap_seqset_add(&s->searchres, uids[count - 1], uids[count - 1]);
        return;
    }
    for (size_t i = 0; i < count; i++)
        imap_seqset_add(&s->searchres, uids[i], uids[i]);
}

bool imap_searchres_contains(const struct imap_session *s, uint32_t uid)
{
    return imap_seqset_contains(&s->searchres, uid);
}

bool imap_searchres_requested(const struct imap_arg *args, size_t argc)
{
    if (argc < 2 || !imap_arg_atom_equals(&args[0], "RETURN") || args[1].type != IMAP_ARG_LIST)
        return false;
    for (size_t i = 0; i < args[1].count; i++) {
        if (imap_arg_atom_equals(&args[1].list[i], "SAVE"))
            return true;
    }
    return false;
}

#include "protocols/imap/imap-search.h"

#include "core/slice.h"
#include "core/xalloc.h"
#include "protocols/imap/imap-date.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum arg_kind {
    ARG_NONE,
    ARG_STRING,
    ARG_HEADER,
    ARG_DATE,
    ARG_NUMBER,
    ARG_UID,
    ARG_MODSEQ,
    ARG_NOT,
    ARG_OR
};

static const struct {
    const char *name;
    enum imap_search_key key;
    enum arg_kind kind;
} search_keys[] = {
    {"ALL", IMAP_SEARCH_ALL, ARG_NONE},
    {"ANSWERED", IMAP_SEARCH_ANSWERED, ARG_NONE},
    {"BCC", IMAP_SEARCH_BCC, ARG_STRING},
    {"BEFORE", IMAP_SEARCH_BEFORE, ARG_DATE},
    {"BODY", IMAP_SEARCH_BODY, ARG_STRING},
    {"CC", IMAP_SEARCH_CC, ARG_STRING},
    {"DELETED", IMAP_SEARCH_DELETED, ARG_NONE},
    {"DRAFT", IMAP_SEARCH_DRAFT, ARG_NONE},
    {"FLAGGED", IMAP_SEARCH_FLAGGED, ARG_NONE},
    {"FROM", IMAP_SEARCH_FROM, ARG_STRING},
    {"HEADER", IMAP_SEARCH_HEADER, ARG_HEADER},
    {"KEYWORD", IMAP_SEARCH_KEYWORD, ARG_STRING},
    {"LARGER", IMAP_SEARCH_LARGER, ARG_NUMBER},
    {"MODSEQ", IMAP_SEARCH_MODSEQ, ARG_MODSEQ},
    {"NEW", IMAP_SEARCH_NEW, ARG_NONE},
    {"NOT", IMAP_SEARCH_NOT, ARG_NOT},
    {"OLD", IMAP_SEARCH_OLD, ARG_NONE},
    {"ON", IMAP_SEARCH_ON, ARG_DATE},
    {"OR", IMAP_SEARCH_OR, ARG_OR},
    {"RECENT", IMAP_SEARCH_RECENT, ARG_NONE},
    {"SEEN", IMAP_SEARCH_SEEN, ARG_NONE},
    {"SENTBEFORE", IMAP_SEARCH_SENTBEFORE, ARG_DATE},
    {"SENTON", IMAP_SEARCH_SENTON, ARG_DATE},
    {"SENTSINCE", IMAP_SEARCH_SENTSINCE, ARG_DATE},
    {"SINCE", IMAP_SEARCH_SINCE, ARG_DATE},
    {"SMALLER", IMAP_SEARCH_SMALLER, ARG_NUMBER},
    {"SUBJECT", IMAP_SEARCH_SUBJECT, ARG_STRING},
    {"TEXT", IMAP_SEARCH_TEXT, ARG_STRING},
    {"TO", IMAP_SEARCH_TO, ARG_STRING},
    {"UID", IMAP_SEARCH_UID, ARG_UID},
    {"UNANSWERED", IMAP_SEARCH_UNANSWERED, ARG_NONE},
    {"UNDELETED", IMAP_SEARCH_UNDELETED, ARG_NONE},
    {"UNDRAFT", IMAP_SEARCH_UNDRAFT, ARG_NONE},
    {"UNFLAGGED", IMAP_SEARCH_UNFLAGGED, ARG_NONE},
    {"UNKEYWORD", IMAP_SEARCH_UNKEYWORD, ARG_STRING},
    {"UNSEEN", IMAP_SEARCH_UNSEEN, ARG_NONE},
};

struct cursor {
    const struct imap_arg *args;
    size_t count;
    size_t i;
    uint32_t max_seq;
    uint32_t max_uid;
    struct petrel_error *err;
};

static bool bad(struct cursor *c, const char *msg)
{
    return petrel_error_set(c->err, PETREL_ERR_INVALID, "%s", msg);
}

static void node_free(struct imap_search_node *n)
{
    for (size_t i = 0; i < n->child_count; i++)
        node_free(&n->children[i]);
    free(n->children);
    free(n->str);
    free(n->header_name);
    free(n->modseq_entry);
    imap_seqset_free(&n->set);
    memset(n, 0, sizeof(*n));
}

void imap_search_program_free(struct imap_search_program *prog)
{
    node_free(&prog->root);
}

static const struct imap_arg *next_arg(struct cursor *c, const char *missing)
{
    if (c->i >= c->count) {
        bad(c, missing);
        return NULL;
    }
    return &c->args[c->i++];
}

static bool take_string(struct cursor *c, char **out, size_t *len)
{
    const struct imap_arg *a = next_arg(c, "Missing search string");
    if (a == NULL)
        return false;
    if (a->type == IMAP_ARG_LIST)
        return bad(c, "Search string expected, not a list");
    *out = xmalloc(a->len + 1);
    memcpy(*out, a->str, a->len);
    (*out)[a->len] = '\0';
    if (len != NULL)
        *len = a->len;
    return true;
}

static bool parse_number(const struct imap_arg *a, uint64_t max, uint64_t *out)
{
    return a->type == IMAP_ARG_ATOM && a->len <= 20 &&
           slice_parse_u64((struct slice){a->str, a->len}, max, out);
}

static bool parse_modseq(struct cursor *c, struct imap_search_node *n)
{
    const struct imap_arg *a = next_arg(c, "Missing MODSEQ value");
    if (a == NULL)
        return false;
    if (a->type == IMAP_ARG_QUOTED || a->type == IMAP_ARG_LITERAL) {
        /* entry-name entry-type-req (RFC 7162 3.1.5) */
        if (a->len == 0 || memchr(a->str, '\0', a->len) != NULL)
            return bad(c, "Invalid MODSEQ entry name");
        n->modseq_entry = xstrdup(a->str);
        const struct imap_arg *type = next_arg(c, "Missing MODSEQ entry type");
        if (type == NULL)
            return false;
        if (imap_arg_atom_equals(type, "all"))
            n->modseq_entry_type = IMAP_SEARCH_ENTRY_ALL;
        else if (imap_arg_atom_equals(type, "shared"))
            n->modseq_entry_type = IMAP_SEARCH_ENTRY_SHARED;
        else if (imap_arg_atom_equals(type, "priv"))
            n->modseq_entry_type = IMAP_SEARCH_ENTRY_PRIV;
        else
            return bad(c, "Invalid MODSEQ entry type");
        a = next_arg(c, "Missing MODSEQ value");
        if (a == NULL)
            return false;
    }
    if (!parse_number(a, INT64_MAX, &n->number))
        return bad(c, "Invalid MODSEQ value");
    return true;
}

static bool parse_key(struct cursor *c, struct imap_search_node *n, size_t depth);

/* Keys until the cursor's end, as children of `n` (an AND). */
static bool parse_group(struct cursor *c, struct imap_search_node *n, size_t depth)
{
    size_t cap = 0;
    n->key = IMAP_SEARCH_AND;
    if (c->i >= c->count)
        return bad(c, "Empty search key list");
    while (c->i < c->count) {
        n->children = xgrow(n->children, &cap, n->child_count + 1, sizeof(*n->children));
        struct imap_search_node *child = &n->children[n->child_count];
        memset(child, 0, sizeof(*child));
        n->child_count++;
        if (!parse_key(c, child, depth))
            return false;
    }
    return true;
}

static bool parse_children(struct cursor *c, struct imap_search_node *n, size_t count, size_t depth)
{
    n->children = xcalloc(count, sizeof(*n->children));
    for (size_t k = 0; k < count; k++) {
        n->child_count++;
        if (!parse_key(c, &n->children[k], depth + 1))
            return false;
    }
    return true;
}

static bool is_seqset_start(const struct imap_arg *a)
{
    return a->type == IMAP_ARG_ATOM && a->len > 0 &&
           ((a->str[0] >= '0' && a->str[0] <= '9') || a->str[0] == '*' || a->str[0] == '$');
}

static bool parse_key(struct cursor *c, struct imap_search_node *n, size_t depth)
{
    if (depth > IMAP_SEARCH_MAX_DEPTH)
        return bad(c, "Search program nested too deeply");
    const struct imap_arg *a = next_arg(c, "Missing search key");
    if (a == NULL)
        return false;
    if (a->type == IMAP_ARG_LIST) {
        struct cursor sub = *c;
        sub.args = a->list;
        sub.count = a->count;
        sub.i = 0;
        return parse_group(&sub, n, depth + 1);
    }
    if (is_seqset_start(a)) {
        n->key = IMAP_SEARCH_SEQSET;
        return imap_seqset_parse(a->str, a->len, c->max_seq, IMAP_SEQSET_ALLOW_SEARCHRES, &n->set,
                                 c->err);
    }
    if (a->type != IMAP_ARG_ATOM)
        return bad(c, "Invalid search key");
    size_t k = 0;
    size_t nkeys = sizeof(search_keys) / sizeof(search_keys[0]);
    while (k < nkeys && !imap_arg_atom_equals(a, search_keys[k].name))
        k++;
    if (k == nkeys)
        return bad(c, "Unknown search key");
    n->key = search_keys[k].key;
    switch (search_keys[k].kind) {
    case ARG_NONE:
        return true;
    case ARG_STRING:
        return take_string(c, &n->str, &n->str_len);
    case ARG_HEADER:
        if (!take_string(c, &n->header_name, NULL))
            return false;
        if (n->header_name[0] == '\0' || strchr(n->header_name, ':') != NULL)
            return bad(c, "Invalid header field name");
        return take_string(c, &n->str, &n->str_len);
    case ARG_DATE: {
        const struct imap_arg *d = next_arg(c, "Missing search date");
        if (d == NULL)
            return false;
        if (d->type == IMAP_ARG_LIST || !imap_date_parse(d->str, d->len, &n->day))
            return bad(c, "Invalid search date");
        return true;
    }
    case ARG_NUMBER: {
        const struct imap_arg *v = next_arg(c, "Missing size");
        if (v == NULL)
            return false;
        if (!parse_number(v, INT64_MAX, &n->number))
            return bad(c, "Invalid size");
        return true;
    }
    case ARG_UID: {
        const struct imap_arg *s = next_arg(c, "Missing UID set");
        if (s == NULL)
            return false;
        if (s->type != IMAP_ARG_ATOM)
            return bad(c, "Invalid UID set");
        return imap_seqset_parse(s->str, s->len, c->max_uid, IMAP_SEQSET_ALLOW_SEARCHRES, &n->set,
                                 c->err);
    }
    case ARG_MODSEQ:
        return parse_modseq(c, n);
    case ARG_NOT:
        return parse_children(c, n, 1, depth);
    case ARG_OR:
        return parse_children(c, n, 2, depth);
    }
    return bad(c, "Unknown search key");
}

/* PARTIAL's range (RFC 5267 5: partial-range = nz-number ":" nz-number). */
static bool parse_partial_range(const struct imap_arg *a, uint32_t *lo, uint32_t *hi)
{
    if (a == NULL || a->type != IMAP_ARG_ATOM)
        return false;
    const char *colon = memchr(a->str, ':', a->len);
    if (colon == NULL)
        return false;
    struct imap_arg left = {.type = IMAP_ARG_ATOM, .str = a->str, .len = (size_t)(colon - a->str)};
    struct imap_arg right = {.type = IMAP_ARG_ATOM, .str = colon + 1, .len = a->len - left.len - 1};
    uint64_t x = 0, y = 0;
    if (!parse_number(&left, UINT32_MAX, &x) || !parse_number(&right, UINT32_MAX, &y) || x == 0 ||
        y == 0)
        return false;
    *lo = (uint32_t)(x < y ? x : y);
    *hi = (uint32_t)(x < y ? y : x);
    return true;
}

static bool parse_return(struct cursor *c, struct imap_search_program *prog)
{
    const struct imap_arg *list = next_arg(c, "Missing RETURN options");
    if (list == NULL)
        return false;
    if (list->type != IMAP_ARG_LIST)
        return bad(c, "RETURN options must be a list");
    static const struct {
        const char *name;
        unsigned bit;
    } options[] = {
        {"MIN", IMAP_SEARCH_RETURN_MIN},       {"MAX", IMAP_SEARCH_RETURN_MAX},
        {"ALL", IMAP_SEARCH_RETURN_ALL},       {"COUNT", IMAP_SEARCH_RETURN_COUNT},
        {"SAVE", IMAP_SEARCH_RETURN_SAVE},     {"PARTIAL", IMAP_SEARCH_RETURN_PARTIAL},
        {"UPDATE", IMAP_SEARCH_RETURN_UPDATE}, {"CONTEXT", IMAP_SEARCH_RETURN_CONTEXT},
    };
    size_t noptions = sizeof(options) / sizeof(options[0]);
    prog->has_return = true;
    for (size_t i = 0; i < list->count; i++) {
        size_t k = 0;
        while (k < noptions && !imap_arg_atom_equals(&list->list[i], options[k].name))
            k++;
        if (k == noptions)
            return bad(c, "Unknown RETURN option");
        unsigned bit = options[k].bit;
        /* RFC 5267 4.3 and 4.4 (with Dovecot's answers): one UPDATE, one
         * PARTIAL, never both PARTIAL and ALL. */
        if ((bit & (IMAP_SEARCH_RETURN_UPDATE | IMAP_SEARCH_RETURN_PARTIAL)) &&
            (prog->return_options & bit))
            return bad(c, bit == IMAP_SEARCH_RETURN_UPDATE ? "UPDATE given twice"
                                                           : "PARTIAL can be used only once");
        if (bit == IMAP_SEARCH_RETURN_PARTIAL) {
            const struct imap_arg *range = i + 1 < list->count ? &list->list[i + 1] : NULL;
            if (range == NULL)
                return bad(c, "PARTIAL range missing");
            if (!parse_partial_range(range, &prog->partial_lo, &prog->partial_hi))
                return bad(c, "Invalid PARTIAL range");
            i++;
        }
        prog->return_options |= bit;
        if ((prog->return_options & IMAP_SEARCH_RETURN_PARTIAL) &&
            (prog->return_options & IMAP_SEARCH_RETURN_ALL))
            return bad(c, "PARTIAL conflicts with ALL");
    }
    /* RFC 4731 3.1: "RETURN ()" is RETURN (ALL). */
    if (list->count == 0)
        prog->return_options = IMAP_SEARCH_RETURN_ALL;
    return true;
}

bool imap_search_parse(const struct imap_arg *args, size_t count, uint32_t max_seq,
                       uint32_t max_uid, struct imap_search_program *out, struct petrel_error *err)
{
    memset(out, 0, sizeof(*out));
    struct cursor c = {args, count, 0, max_seq, max_uid, err};
    bool ok = true;
    if (c.i < count && imap_arg_atom_equals(&args[c.i], "RETURN")) {
        c.i++;
        ok = parse_return(&c, out);
    }
    if (ok && c.i < count && imap_arg_atom_equals(&args[c.i], "CHARSET")) {
        c.i++;
        const struct imap_arg *cs = next_arg(&c, "Missing charset");
        ok = cs != NULL;
        if (ok && cs->type == IMAP_ARG_LIST)
            ok = bad(&c, "Invalid charset");
        if (ok && strcasecmp(cs->str, "UTF-8") == 0)
            out->charset_utf8 = true;
        else if (ok && strcasecmp(cs->str, "US-ASCII") != 0)
            ok = petrel_error_set(err, PETREL_ERR_UNSUPPORTED, "Unsupported charset");
    }
    if (ok)
        ok = parse_group(&c, &out->root, 0);
    if (!ok)
        imap_search_program_free(out);
    return ok;
}

static unsigned node_needs(const struct imap_search_node *n)
{
    unsigned needs = 0;
    switch (n->key) {
    case IMAP_SEARCH_ALL:
    case IMAP_SEARCH_SEQSET:
    case IMAP_SEARCH_UID:
        break;
    case IMAP_SEARCH_ANSWERED:
    case IMAP_SEARCH_DELETED:
    case IMAP_SEARCH_DRAFT:
    case IMAP_SEARCH_FLAGGED:
    case IMAP_SEARCH_NEW:
    case IMAP_SEARCH_OLD:
    case IMAP_SEARCH_RECENT:
    case IMAP_SEARCH_SEEN:
    case IMAP_SEARCH_UNANSWERED:
    case IMAP_SEARCH_UNDELETED:
    case IMAP_SEARCH_UNDRAFT:
    case IMAP_SEARCH_UNFLAGGED:
    case IMAP_SEARCH_UNSEEN:
    case IMAP_SEARCH_KEYWORD:
    case IMAP_SEARCH_UNKEYWORD:
        needs |= IMAP_SEARCH_NEEDS_FLAGS;
        break;
    case IMAP_SEARCH_BCC:
    case IMAP_SEARCH_CC:
    case IMAP_SEARCH_FROM:
    case IMAP_SEARCH_SUBJECT:
    case IMAP_SEARCH_TO:
    case IMAP_SEARCH_HEADER:
    case IMAP_SEARCH_SENTBEFORE:
    case IMAP_SEARCH_SENTON:
    case IMAP_SEARCH_SENTSINCE:
        needs |= IMAP_SEARCH_NEEDS_HEADER;
        break;
    case IMAP_SEARCH_BODY:
        needs |= IMAP_SEARCH_NEEDS_BODY;
        break;
    case IMAP_SEARCH_TEXT:
        needs |= IMAP_SEARCH_NEEDS_HEADER | IMAP_SEARCH_NEEDS_BODY;
        break;
    case IMAP_SEARCH_BEFORE:
    case IMAP_SEARCH_ON:
    case IMAP_SEARCH_SINCE:
        needs |= IMAP_SEARCH_NEEDS_INTERNALDATE;
        break;
    case IMAP_SEARCH_LARGER:
    case IMAP_SEARCH_SMALLER:
        needs |= IMAP_SEARCH_NEEDS_SIZE;
        break;
    case IMAP_SEARCH_MODSEQ:
        needs |= IMAP_SEARCH_NEEDS_MODSEQ;
        break;
    case IMAP_SEARCH_NOT:
    case IMAP_SEARCH_OR:
    case IMAP_SEARCH_AND:
        break;
    }
    for (size_t i = 0; i < n->child_count; i++)
        needs |= node_needs(&n->children[i]);
    return needs;
}

unsigned imap_search_needs(const struct imap_search_program *prog)
{
    return node_needs(&prog->root);
}

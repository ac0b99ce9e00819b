/* CONTEXT=SEARCH and CONTEXT=SORT (RFC 5267 4): a SEARCH or SORT with
 * RETURN (UPDATE) stays live, and the session sends "* ESEARCH (TAG ...)
 * ADDTO/REMOVEFROM" whenever the messages matching it change, until
 * CANCELUPDATE or the folder is closed.
 *
 * A context keeps its search program with the sequence sets and "$" in it
 * turned into the UIDs they named when the command ran (the messages meant
 * then, as Dovecot does), and its result as UIDs in result order. Nothing
 * is evaluated between syncs: updates are computed where the session sends
 * its other untagged updates (imap_selected_sync), so they obey the same
 * rules (no EXPUNGE-related update during FETCH, STORE or SEARCH, nothing
 * after BYE). Removals caused by expunges go out before the EXPUNGE (or
 * VANISHED) lines, numbered as the client still numbers; additions after
 * EXISTS and FETCH (RFC 5267 4.3.3, 4.3.4). Flag changes the session made
 * itself (STORE, FETCH setting \Seen) enter the view without a sync: their
 * UIDs wait in a list and are evaluated before the command's tagged reply.
 *
 * SEARCH contexts report position 0 and mailbox order (as Dovecot); SORT
 * contexts report positions in sort order. Where a new member goes is found
 * by binary search over the current order, each message's sort facts read
 * at most once per sync for all contexts, so an update costs a few header
 * reads, not a new sort. */
#include "protocols/imap/imap-private.h"

#include "core/xalloc.h"
#include "protocols/imap/imap-search.h"
#include "protocols/imap/imap-sort.h"

#include <stdlib.h>
#include <string.h>

struct imap_context {
    char tag[64];
    bool uid_mode;
    bool sorted;
    struct imap_search_program prog;
    struct imap_sort_program sort;
    bool sort_header;  /* the sort program reads headers */
    uint32_t *order;   /* the result as UIDs, in result order */
    uint32_t *members; /* SORT: the same UIDs ascending (SEARCH: NULL, order is) */
    size_t count;
};

/* ---------- helpers ---------- */

/* Appends `v` to a set built in ascending order, in O(1) (imap_seqset_add
 * would sort again for every adjacent number). */
static void seqset_push(struct imap_seqset *set, uint32_t v)
{
    if (set->count > 0 && set->ranges[set->count - 1].hi + 1 == v) {
        set->ranges[set->count - 1].hi = v;
        return;
    }
    imap_seqset_add(set, v, v);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static bool sorted_has(const uint32_t *v, size_t n, uint32_t x)
{
    return bsearch(&x, v, n, sizeof(*v), cmp_u32) != NULL;
}

static const uint32_t *members_of(const struct imap_context *c)
{
    return c->sorted ? c->members : c->order;
}

static void context_free(struct imap_context *c)
{
    imap_search_program_free(&c->prog);
    free(c->order);
    free(c->members);
    free(c);
}

static size_t entries_held(const struct imap_session *s)
{
    size_t n = 0;
    for (size_t i = 0; i < s->context_count; i++)
        n += s->contexts[i]->count;
    return n;
}

/* Sequence sets and "$" become the UIDs they stand for now. */
static void pin_node(struct imap_session *s, struct imap_search_node *n)
{
    if ((n->key == IMAP_SEARCH_SEQSET || n->key == IMAP_SEARCH_UID) && n->set.searchres) {
        struct imap_seqset copy = {0};
        for (size_t i = 0; i < s->searchres.count; i++)
            imap_seqset_add(&copy, s->searchres.ranges[i].lo, s->searchres.ranges[i].hi);
        imap_seqset_free(&n->set);
        n->set = copy;
        n->key = IMAP_SEARCH_UID;
    } else if (n->key == IMAP_SEARCH_SEQSET) {
        struct imap_seqset uids = {0};
        size_t count = mailbox_view_count(s->view);
        for (size_t i = 0; i < n->set.count; i++) {
            for (uint64_t seq = n->set.ranges[i].lo; seq <= n->set.ranges[i].hi && seq <= count;
                 seq++)
                seqset_push(&uids, mailbox_view_at(s->view, (uint32_t)seq)->uid);
        }
        imap_seqset_free(&n->set);
        n->set = uids;
        n->key = IMAP_SEARCH_UID;
    }
    for (size_t i = 0; i < n->child_count; i++)
        pin_node(s, &n->children[i]);
}

void imap_context_pin(struct imap_session *s, struct imap_search_program *prog)
{
    pin_node(s, &prog->root);
}

/* What the client calls a message now: its UID or its sequence number. */
static uint32_t number_of(const struct imap_session *s, const struct imap_context *c, uint32_t uid)
{
    return c->uid_mode ? uid : mailbox_view_seq(s->view, uid);
}

/* ---------- life cycle ---------- */

bool imap_context_tag_in_use(const struct imap_session *s, const char *tag)
{
    for (size_t i = 0; i < s->context_count; i++) {
        if (strcmp(s->contexts[i]->tag, tag) == 0)
            return true;
    }
    return false;
}

void imap_context_start(struct imap_session *s, bool uid_mode, struct imap_search_program *prog,
                        const struct imap_sort_program *sort, const uint32_t *uids, size_t count)
{
    if (s->context_count >= IMAP_CONTEXT_MAX ||
        entries_held(s) + count > IMAP_CONTEXT_MAX_ENTRIES) {
        /* RFC 5267 4.3.1: the search is answered; only the updates are refused. */
        imap_send(s, "* NO [NOUPDATE \"%s\"] Too many contexts.", s->tag);
        imap_search_program_free(prog);
        return;
    }
    struct imap_context *c = xcalloc(1, sizeof(*c));
    snprintf(c->tag, sizeof(c->tag), "%s", s->tag);
    c->uid_mode = uid_mode;
    c->prog = *prog;
    memset(prog, 0, sizeof(*prog));
    c->sorted = sort != NULL;
    if (sort != NULL) {
        c->sort = *sort;
        c->sort_header = imap_sort_needs_header(sort);
    }
    c->count = count;
    c->order = xcalloc(count + 1, sizeof(*c->order));
    if (count > 0)
        memcpy(c->order, uids, count * sizeof(*uids));
    if (c->sorted) {
        c->members = xcalloc(count + 1, sizeof(*c->members));
        if (count > 0)
            memcpy(c->members, uids, count * sizeof(*uids));
        qsort(c->members, count, sizeof(*c->members), cmp_u32);
    }
    s->contexts = xrealloc(s->contexts, (s->context_count + 1) * sizeof(*s->contexts));
    s->contexts[s->context_count++] = c;
}

void imap_context_free_all(struct imap_session *s)
{
    for (size_t i = 0; i < s->context_count; i++)
        context_free(s->contexts[i]);
    free(s->contexts);
    s->contexts = NULL;
    s->context_count = 0;
    free(s->context_dirty);
    s->context_dirty = NULL;
    s->context_dirty_count = s->context_dirty_cap = 0;
}

void imap_context_note_flags(struct imap_session *s, const struct mailbox_flags_result *res,
                             size_t count)
{
    if (s->context_count == 0)
        return;
    s->context_dirty = xgrow(s->context_dirty, &s->context_dirty_cap,
                             s->context_dirty_count + count, sizeof(*s->context_dirty));
    for (size_t i = 0; i < count; i++)
        s->context_dirty[s->context_dirty_count++] = res[i].uid;
}

/* ---------- removing ---------- */

/* Takes the members in `gone` (ascending UIDs) out of `c`, appending the
 * REMOVEFROM item to `line`; `number` maps a UID to what the client
 * calls it at this point. */
static void remove_members(const struct imap_session *s, struct imap_context *c,
                           const uint32_t *gone, size_t gone_count, struct buf *line,
                           uint32_t (*number)(const struct imap_session *,
                                              const struct imap_context *, uint32_t, void *),
                           void *arg)
{
    if (gone_count == 0 || c->count == 0)
        return;
    size_t kept = 0;
    if (!c->sorted) {
        struct imap_seqset set = {0};
        for (size_t i = 0; i < c->count; i++) {
            if (sorted_has(gone, gone_count, c->order[i]))
                seqset_push(&set, number(s, c, c->order[i], arg)); /* ascending */
            else
                c->order[kept++] = c->order[i];
        }
        if (set.count > 0) {
            buf_append_str(line, " REMOVEFROM (0 ");
            imap_seqset_format(&set, line);
            buf_append_char(line, ')');
        }
        imap_seqset_free(&set);
        c->count = kept;
        return;
    }
    /* Runs of removed members at consecutive positions form one pair; the
     * position is where the run starts once the earlier runs are gone. */
    uint32_t *run = xcalloc(c->count + 1, sizeof(*run));
    bool any = false;
    for (size_t i = 0; i < c->count;) {
        if (!sorted_has(gone, gone_count, c->order[i])) {
            c->order[kept++] = c->order[i++];
            continue;
        }
        size_t n = 0;
        size_t position = kept + 1;
        while (i < c->count && sorted_has(gone, gone_count, c->order[i]))
            run[n++] = number(s, c, c->order[i++], arg);
        buf_printf(line, any ? " %zu " : " REMOVEFROM (%zu ", position);
        imap_append_ordered_set(line, run, n);
        any = true;
    }
    if (any)
        buf_append_char(line, ')');
    free(run);
    c->count = kept;
    memcpy(c->members, c->order, kept * sizeof(*c->order));
    qsort(c->members, kept, sizeof(*c->members), cmp_u32);
}

struct expunge_numbers {
    const uint32_t *gone; /* ascending UIDs expunged */
    size_t count;
};

/* The sequence number a message had before the expunges in `arg`:
 * the view no longer has them, so those below it are counted back in. */
static uint32_t number_before_expunge(const struct imap_session *s, const struct imap_context *c,
                                      uint32_t uid, void *arg)
{
    if (c->uid_mode)
        return uid;
    const struct expunge_numbers *e = arg;
    size_t lo = 0, hi = mailbox_view_count(s->view);
    while (lo < hi) { /* view entries below uid */
        size_t mid = lo + (hi - lo) / 2;
        if (mailbox_view_at(s->view, (uint32_t)(mid + 1))->uid < uid)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t a = 0, b = e->count;
    while (a < b) { /* expunged below uid */
        size_t mid = a + (b - a) / 2;
        if (e->gone[mid] < uid)
            a = mid + 1;
        else
            b = mid;
    }
    return (uint32_t)(lo + a + 1);
}

static uint32_t number_now(const struct imap_session *s, const struct imap_context *c, uint32_t uid,
                           void *arg)
{
    (void)arg;
    return number_of(s, c, uid);
}

static void send_line(struct imap_session *s, const struct imap_context *c, struct buf *items)
{
    if (items->len == 0)
        return;
    struct buf line = {0};
    buf_printf(&line, "* ESEARCH (TAG \"%s\")%s", c->tag, c->uid_mode ? " UID" : "");
    buf_append(&line, items->data, items->len);
    buf_append_str(&line, "\r\n");
    imap_send_raw(s, line.data, line.len);
    buf_free(&line);
}

void imap_context_expunged(struct imap_session *s, const uint32_t *uids, size_t count)
{
    if (s->context_count == 0 || count == 0)
        return;
    struct expunge_numbers e = {uids, count};
    for (size_t i = 0; i < s->context_count; i++) {
        struct buf items = {0};
        remove_members(s, s->contexts[i], uids, count, &items, number_before_expunge, &e);
        send_line(s, s->contexts[i], &items);
        buf_free(&items);
    }
}

/* ---------- adding ---------- */

/* The sort facts read during one sync, shared by every SORT context (ten
 * contexts over the same messages read each header once, not ten times):
 * UID -> index into `facts`, open addressing. One table per kind of facts
 * (with or without header fields). */
struct facts_table {
    struct imap_session *s;
    bool header;
    uint32_t *keys; /* 0: a free slot (UIDs start at 1) */
    size_t *slots;
    size_t mask; /* slots - 1; 0 before the first lookup */
    struct imap_sort_facts *facts;
    bool *ok; /* per fact: the message could be read */
    size_t count, cap, ok_cap;
};

static void table_put(uint32_t *keys, size_t *slots, size_t mask, uint32_t uid, size_t index)
{
    size_t h = (size_t)(uid * 2654435761u) & mask;
    while (keys[h] != 0)
        h = (h + 1) & mask;
    keys[h] = uid;
    slots[h] = index;
}

/* The index of `uid`'s facts, read now if they are not in the table. */
static size_t table_get(struct facts_table *t, uint32_t uid)
{
    if (t->mask == 0 || (t->count + 1) * 2 > t->mask + 1) {
        size_t size = t->mask == 0 ? 64 : (t->mask + 1) * 2;
        uint32_t *keys = xcalloc(size, sizeof(*keys));
        size_t *slots = xcalloc(size, sizeof(*slots));
        for (size_t h = 0; h < (t->mask == 0 ? 0 : t->mask + 1); h++) {
            if (t->keys[h] != 0)
                table_put(keys, slots, size - 1, t->keys[h], t->slots[h]);
        }
        free(t->keys);
        free(t->slots);
        t->keys = keys;
        t->slots = slots;
        t->mask = size - 1;
    }
    size_t h = (size_t)(uid * 2654435761u) & t->mask;
    while (t->keys[h] != 0 && t->keys[h] != uid)
        h = (h + 1) & t->mask;
    if (t->keys[h] == uid)
        return t->slots[h];
    t->facts = xgrow(t->facts, &t->cap, t->count + 1, sizeof(*t->facts));
    t->ok = xgrow(t->ok, &t->ok_cap, t->count + 1, sizeof(*t->ok));
    t->ok[t->count] = imap_sort_facts_read(t->s, uid, t->header, &t->facts[t->count]);
    t->keys[h] = uid;
    t->slots[h] = t->count;
    return t->count++;
}

static void table_free(struct facts_table *t)
{
    for (size_t i = 0; i < t->count; i++)
        imap_sort_facts_free(&t->facts[i]);
    free(t->facts);
    free(t->ok);
    free(t->keys);
    free(t->slots);
}

/* Whether the new member `add` sorts after the old member at `mid`. A
 * member whose file is gone (expunged elsewhere; its REMOVEFROM comes with
 * the next sync) has no facts to compare: it answers as the next readable
 * member before `hi` does, or "no" when there is none, which keeps the
 * answers monotonic, so the binary search places `add` right among the
 * readable members. */
static bool sorts_after(struct facts_table *facts, const struct imap_context *c, size_t mid,
                        size_t hi, const struct imap_sort_facts *add)
{
    for (size_t i = mid; i < hi; i++) {
        size_t at = table_get(facts, c->order[i]); /* may move facts->facts */
        if (facts->ok[at])
            return imap_sort_compare(&c->sort, &facts->facts[at], add) < 0;
    }
    return false;
}

/* Adds `uids` (ascending, none a member yet, each readable) to `c`,
 * appending ADDTO; a SORT context reads sort facts through `facts`. */
static void add_members(struct imap_session *s, struct imap_context *c, const uint32_t *uids,
                        size_t n, struct facts_table *facts, struct buf *line)
{
    if (n == 0)
        return;
    if (!c->sorted) {
        struct imap_seqset set = {0};
        uint32_t *merged = xcalloc(c->count + n + 1, sizeof(*merged));
        size_t i = 0, j = 0, k = 0;
        while (i < c->count || j < n) {
            if (j >= n || (i < c->count && c->order[i] < uids[j])) {
                merged[k++] = c->order[i++];
            } else {
                merged[k++] = uids[j];
                seqset_push(&set, number_of(s, c, uids[j++])); /* ascending */
            }
        }
        buf_append_str(line, " ADDTO (0 ");
        imap_seqset_format(&set, line);
        buf_append_char(line, ')');
        imap_seqset_free(&set);
        free(c->order);
        c->order = merged;
        c->count = k;
        return;
    }
    /* The new members in sort order, each with the number of old members
     * sorting before it: its final position is that plus its own index.
     * `adds` are shallow copies: the table owns the strings. */
    struct imap_sort_facts *adds = xcalloc(n, sizeof(*adds));
    for (size_t j = 0; j < n; j++) {
        size_t at = table_get(facts, uids[j]); /* before reading facts->facts: it may move */
        adds[j] = facts->facts[at];
    }
    imap_sort_facts(&c->sort, adds, n);
    size_t *before = xcalloc(n, sizeof(*before));
    for (size_t j = 0; j < n; j++) {
        size_t lo = j > 0 ? before[j - 1] : 0, hi = c->count;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (sorts_after(facts, c, mid, hi, &adds[j]))
                lo = mid + 1;
            else
                hi = mid;
        }
        before[j] = lo;
    }
    uint32_t *merged = xcalloc(c->count + n + 1, sizeof(*merged));
    uint32_t *run = xcalloc(n + 1, sizeof(*run));
    size_t k = 0, old = 0;
    bool any = false;
    for (size_t j = 0; j < n;) {
        while (old < before[j])
            merged[k++] = c->order[old++];
        size_t position = k + 1, r = 0;
        /* consecutive final positions: no old member between them */
        do {
            merged[k++] = adds[j].number;
            run[r++] = number_of(s, c, adds[j].number);
            j++;
        } while (j < n && before[j] == old);
        buf_printf(line, any ? " %zu " : " ADDTO (%zu ", position);
        imap_append_ordered_set(line, run, r);
        any = true;
    }
    while (old < c->count)
        merged[k++] = c->order[old++];
    buf_append_char(line, ')');
    free(adds);
    free(before);
    free(run);
    free(c->order);
    c->order = merged;
    c->count = k;
    free(c->members);
    c->members = xcalloc(k + 1, sizeof(*c->members));
    memcpy(c->members, merged, k * sizeof(*merged));
    qsort(c->members, k, sizeof(*c->members), cmp_u32);
}

/* The session evaluates `uid` again at its next sync or flush. */
static void requeue(struct imap_session *s, uint32_t uid)
{
    s->context_dirty = xgrow(s->context_dirty, &s->context_dirty_cap, s->context_dirty_count + 1,
                             sizeof(*s->context_dirty));
    s->context_dirty[s->context_dirty_count++] = uid;
}

/* Evaluates `candidates` (ascending UIDs) for every context and sends what
 * changed, removals first. Candidates no longer in the view are skipped; one
 * whose file is gone while the view still has it (expunged elsewhere, not
 * synced yet) is left as it is and evaluated again next time, when the sync
 * will have taken it out. */
static void evaluate(struct imap_session *s, const uint32_t *candidates, size_t n)
{
    if (n == 0)
        return;
    uint32_t *gone = xcalloc(n, sizeof(*gone));
    uint32_t *added = xcalloc(n, sizeof(*added));
    bool *again = xcalloc(n, sizeof(*again));
    struct facts_table tables[2] = {{.s = s, .header = false}, {.s = s, .header = true}};
    for (size_t i = 0; i < s->context_count; i++) {
        struct imap_context *c = s->contexts[i];
        struct facts_table *facts = &tables[c->sort_header];
        size_t gone_count = 0, added_count = 0;
        uint32_t hint = 1;
        for (size_t k = 0; k < n; k++) {
            uint32_t seq = mailbox_view_seq_hint(s->view, candidates[k], hint);
            if (seq == 0)
                continue;
            hint = seq + 1;
            bool unreadable = false;
            bool match = imap_search_match(s, &c->prog, seq, &unreadable);
            bool member = sorted_has(members_of(c), c->count, candidates[k]);
            if (!unreadable && !member && match && c->sorted) {
                size_t at = table_get(facts, candidates[k]); /* may move facts->ok */
                unreadable = !facts->ok[at];
            }
            if (unreadable)
                again[k] = true;
            else if (member && !match)
                gone[gone_count++] = candidates[k];
            else if (!member && match)
                added[added_count++] = candidates[k];
        }
        struct buf items = {0};
        remove_members(s, c, gone, gone_count, &items, number_now, NULL);
        add_members(s, c, added, added_count, facts, &items);
        send_line(s, c, &items);
        buf_free(&items);
    }
    for (size_t k = 0; k < n; k++) {
        if (again[k])
            requeue(s, candidates[k]);
    }
    table_free(&tables[0]);
    table_free(&tables[1]);
    free(again);
    free(gone);
    free(added);
}

void imap_context_changed(struct imap_session *s, const struct mailbox_view_changes *ch,
                          uint32_t newly_named)
{
    if (s->context_count == 0)
        return;
    /* What may have changed: new messages, messages whose flags changed
     * (here or by this session), and messages carrying a keyword whose name
     * the view has just learnt (KEYWORD compares names). Expunged ones
     * among them are skipped by evaluate(). */
    size_t count = mailbox_view_count(s->view);
    size_t cap = ch->changed_count + s->context_dirty_count + ch->new_count + 1;
    uint32_t *uids = xcalloc(cap, sizeof(*uids));
    size_t n = 0;
    for (size_t i = 0; i < ch->changed_count; i++) {
        const struct mailbox_view_entry *e = mailbox_view_at(s->view, ch->changed_seqs[i]);
        if (e != NULL)
            uids[n++] = e->uid;
    }
    for (size_t i = 0; i < s->context_dirty_count; i++)
        uids[n++] = s->context_dirty[i];
    s->context_dirty_count = 0;
    for (size_t seq = count - (ch->new_count < count ? ch->new_count : count) + 1; seq <= count;
         seq++)
        uids[n++] = mailbox_view_at(s->view, (uint32_t)seq)->uid;
    for (uint32_t seq = 1; newly_named != 0 && seq <= count; seq++) {
        const struct mailbox_view_entry *e = mailbox_view_at(s->view, seq);
        if (e->keywords & newly_named) {
            uids = xgrow(uids, &cap, n + 1, sizeof(*uids));
            uids[n++] = e->uid;
        }
    }
    qsort(uids, n, sizeof(*uids), cmp_u32);
    size_t unique = 0;
    for (size_t i = 0; i < n; i++) {
        if (unique == 0 || uids[unique - 1] != uids[i])
            uids[unique++] = uids[i];
    }
    n = unique;
    evaluate(s, uids, n);
    free(uids);
}

void imap_context_flush(struct imap_session *s)
{
    if (s->context_count == 0 || s->context_dirty_count == 0)
        return;
    struct mailbox_view_changes none = {0};
    imap_context_changed(s, &none, 0);
}

/* ---------- CANCELUPDATE (RFC 5267 4.3.5) ---------- */

static void cmd_cancelupdate(struct imap_session *s, const struct imap_command *cmd)
{
    if (cmd->arg_count == 0) {
        imap_reply_bad(s, "CANCELUPDATE needs one or more quoted tags.");
        return;
    }
    for (size_t i = 0; i < cmd->arg_count; i++) {
        if (cmd->args[i].type != IMAP_ARG_QUOTED) {
            imap_reply_bad(s, "CANCELUPDATE takes quoted tags.");
            return;
        }
    }
    bool unknown = false;
    for (size_t i = 0; i < cmd->arg_count; i++) {
        const char *tag = cmd->args[i].str;
        size_t k = 0;
        while (k < s->context_count && strcmp(s->contexts[k]->tag, tag) != 0)
            k++;
        if (k == s->context_count) {
            unknown = true;
            continue;
        }
        context_free(s->contexts[k]);
        memmove(&s->contexts[k], &s->contexts[k + 1],
                (s->context_count - k - 1) * sizeof(*s->contexts));
        s->context_count--;
    }
    if (unknown)
        imap_reply_no(s, "Unknown tag.");
    else
        imap_reply_ok(s, "Updates cancelled.");
}

const struct imap_command_def imap_commands_context[] = {
    {"CANCELUPDATE", IMAP_IN(IMAP_STATE_SELECTED), cmd_cancelupdate},
    {NULL, 0, NULL},
};

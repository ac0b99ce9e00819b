/* THREAD=ORDEREDSUBJECT and THREAD=REFERENCES (see imap-thread.h). */
#include "protocols/imap/imap-thread.h"

#include "core/stable-sort.h"
#include "core/xalloc.h"
#include "protocols/imap/imap-sort.h"

#include <stdlib.h>
#include <string.h>

#define NONE SIZE_MAX

/* ---------- Message-IDs ---------- */

bool imap_thread_next_msgid(const char *value, size_t len, size_t *pos, struct buf *id)
{
    size_t i = *pos;
    while (i < len) {
        if (value[i] == '(') { /* a comment, possibly nested */
            int depth = 0;
            for (; i < len; i++) {
                if (value[i] == '\\' && i + 1 < len)
                    i++;
                else if (value[i] == '(')
                    depth++;
                else if (value[i] == ')' && --depth == 0)
                    break;
            }
            i++;
            continue;
        }
        if (value[i] != '<') {
            i++;
            continue;
        }
        buf_reset(id);
        size_t k = i + 1;
        bool at = false, ok = true;
        while (k < len && value[k] != '>' && value[k] != '<') {
            char c = value[k];
            if (c == '@') {
                ok = ok && !at && id->len > 0;
                at = true;
            }
            if (c != ' ' && c != '\t' && c != '\r' && c != '\n')
                buf_append_char(id, c);
            k++;
        }
        if (k < len && value[k] == '>' && ok && at && id->data[id->len - 1] != '@') {
            *pos = k + 1;
            return true;
        }
        i = k; /* at the next '<' or the end */
    }
    *pos = len;
    return false;
}

/* ---------- shared: base subjects ---------- */

struct subj {
    char *base; /* casemapped base subject */
    bool reply;
};

static void subjects_make(const struct imap_thread_msg *msgs, size_t count, struct subj *out)
{
    for (size_t i = 0; i < count; i++) {
        struct buf b = {0};
        const char *s = msgs[i].subject != NULL ? msgs[i].subject : "";
        out[i].reply = imap_base_subject(s, strlen(s), &b);
        imap_casemap(b.data, b.len);
        out[i].base = xstrdup(buf_cstr(&b));
        buf_free(&b);
    }
}

static void subjects_free(struct subj *s, size_t count)
{
    for (size_t i = 0; i < count; i++)
        free(s[i].base);
    free(s);
}

/* ---------- ORDEREDSUBJECT (RFC 5256 3.1) ---------- */

struct os_ctx {
    const struct imap_thread_msg *msgs;
    const struct subj *subj;
};

static int os_cmp(const struct os_ctx *c, size_t a, size_t b, bool by_subject)
{
    if (by_subject) {
        int r = strcmp(c->subj[a].base, c->subj[b].base);
        if (r != 0)
            return r;
    }
    if (c->msgs[a].date != c->msgs[b].date)
        return c->msgs[a].date < c->msgs[b].date ? -1 : 1;
    return a < b ? -1 : a > b ? 1 : 0;
}

struct os_sort {
    const struct os_ctx *c;
    bool by_subject;
};

static int os_cmp_sort(const void *a, const void *b, void *ctx)
{
    const struct os_sort *o = ctx;
    return os_cmp(o->c, *(const size_t *)a, *(const size_t *)b, o->by_subject);
}

static void index_sort(const struct os_ctx *c, size_t *v, size_t n, bool by_subject)
{
    struct os_sort o = {c, by_subject};
    stable_sort(v, n, sizeof(*v), os_cmp_sort, &o);
}

void imap_thread_orderedsubject(const struct imap_thread_msg *msgs, size_t count, struct buf *out)
{
    if (count == 0)
        return;
    struct subj *subj = xcalloc(count, sizeof(*subj));
    subjects_make(msgs, count, subj);
    struct os_ctx c = {msgs, subj};
    size_t *order = xcalloc(count, sizeof(*order));
    for (size_t i = 0; i < count; i++)
        order[i] = i;
    /* By base subject, then sent date: each run of one subject is a
     * thread whose first message is the parent of all the others. */
    index_sort(&c, order, count, true);
    size_t *starts = xcalloc(count, sizeof(*starts)); /* index into order */
    size_t *firsts = xcalloc(count, sizeof(*firsts)); /* the thread's first message */
    size_t threads = 0;
    for (size_t i = 0; i < count; i++) {
        if (i == 0 || strcmp(subj[order[i]].base, subj[order[i - 1]].base) != 0) {
            starts[threads] = i;
            firsts[threads] = order[i];
            threads++;
        }
    }
    /* Threads in the order of their first messages' sent dates. */
    size_t *torder = xcalloc(threads, sizeof(*torder));
    for (size_t t = 0; t < threads; t++)
        torder[t] = firsts[t];
    index_sort(&c, torder, threads, false);
    size_t *thread_of = xcalloc(count, sizeof(*thread_of)); /* first message -> thread */
    for (size_t t = 0; t < threads; t++)
        thread_of[firsts[t]] = t;
    for (size_t k = 0; k < threads; k++) {
        size_t t = thread_of[torder[k]];
        size_t from = starts[t];
        size_t to = t + 1 < threads ? starts[t + 1] : count;
        buf_printf(out, "(%u", msgs[order[from]].number);
        if (to - from == 2) {
            buf_printf(out, " %u", msgs[order[from + 1]].number);
        } else if (to - from > 2) {
            buf_append_char(out, ' ');
            for (size_t i = from + 1; i < to; i++)
                buf_printf(out, "(%u)", msgs[order[i]].number);
        }
        buf_append_char(out, ')');
    }
    free(thread_of);
    free(torder);
    free(firsts);
    free(starts);
    free(order);
    subjects_free(subj, count);
}

/* ---------- REFERENCES (RFC 5256 3.2) ---------- */

struct container {
    size_t msg; /* index into msgs, NONE for a dummy */
    size_t parent, first_child, next_sibling;
    bool deleted;
};

/* Parent steps the loop checks of one THREAD may take in all: a hostile
 * References chain could otherwise make linking quadratic in the header
 * bytes. Past it a link is not made (as if it made a loop), so the answer
 * stays a valid thread list, less linked. A child without descendants
 * (every new message, every new dummy) needs no walk at all, so ordinary
 * mailboxes spend next to nothing of it. */
#define LOOP_CHECK_BUDGET 50000000u

struct tree {
    struct container *c;
    size_t count, cap;
    size_t budget; /* loop-check steps left */
};

static size_t container_new(struct tree *t, size_t msg)
{
    t->c = xgrow(t->c, &t->cap, t->count + 1, sizeof(*t->c));
    t->c[t->count] = (struct container){msg, NONE, NONE, NONE, false};
    return t->count++;
}

static void unlink_child(struct tree *t, size_t child)
{
    size_t p = t->c[child].parent;
    if (p == NONE)
        return;
    size_t *link = &t->c[p].first_child;
    while (*link != child)
        link = &t->c[*link].next_sibling;
    *link = t->c[child].next_sibling;
    t->c[child].parent = NONE;
    t->c[child].next_sibling = NONE;
}

static void append_child(struct tree *t, size_t parent, size_t child)
{
    t->c[child].parent = parent;
    t->c[child].next_sibling = NONE;
    size_t *link = &t->c[parent].first_child;
    while (*link != NONE)
        link = &t->c[*link].next_sibling;
    *link = child;
}

/* Whether `a` is `b` or one of b's descendants (true too once the budget
 * is spent). */
static bool is_under(struct tree *t, size_t a, size_t b)
{
    if (a != b && t->c[b].first_child == NONE)
        return false; /* b has no descendants: nothing to walk */
    for (size_t x = a; x != NONE; x = t->c[x].parent) {
        if (x == b || t->budget == 0)
            return true;
        t->budget--;
    }
    return false;
}

/* The Message-ID table: open addressing over string keys. */
struct id_table {
    char **keys;
    size_t *vals;
    size_t cap, used;
};

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s != '\0'; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static size_t *id_slot(struct id_table *tb, const char *key, bool create)
{
    if (create && (tb->used + 1) * 2 > tb->cap) {
        size_t ncap = tb->cap == 0 ? 64 : tb->cap * 2;
        char **nk = xcalloc(ncap, sizeof(*nk));
        size_t *nv = xcalloc(ncap, sizeof(*nv));
        for (size_t i = 0; i < tb->cap; i++) {
            if (tb->keys[i] == NULL)
                continue;
            size_t j = hash_str(tb->keys[i]) & (ncap - 1);
            while (nk[j] != NULL)
                j = (j + 1) & (ncap - 1);
            nk[j] = tb->keys[i];
            nv[j] = tb->vals[i];
        }
        free(tb->keys);
        free(tb->vals);
        tb->keys = nk;
        tb->vals = nv;
        tb->cap = ncap;
    }
    if (tb->cap == 0)
        return NULL;
    size_t j = hash_str(key) & (tb->cap - 1);
    while (tb->keys[j] != NULL) {
        if (strcmp(tb->keys[j], key) == 0) /* Message-IDs compare case-sensitively */
            return &tb->vals[j];
        j = (j + 1) & (tb->cap - 1);
    }
    if (!create)
        return NULL;
    tb->keys[j] = xstrdup(key);
    tb->vals[j] = NONE;
    tb->used++;
    return &tb->vals[j];
}

static void id_table_free(struct id_table *tb)
{
    for (size_t i = 0; i < tb->cap; i++)
        free(tb->keys[i]);
    free(tb->keys);
    free(tb->vals);
}

/* The container of a referenced id, a dummy created when it is new. */
static size_t ref_container(struct tree *t, struct id_table *tb, const char *id)
{
    size_t *slot = id_slot(tb, id, true);
    if (*slot == NONE)
        *slot = container_new(t, NONE);
    return *slot;
}

/* Step 1: the id table and the parent/child links. */
static void build_links(struct tree *t, const struct imap_thread_msg *msgs, size_t count)
{
    struct id_table tb = {0};
    struct buf id = {0};
    size_t *refs = NULL;
    size_t refs_cap = 0;
    for (size_t m = 0; m < count; m++) {
        const struct imap_thread_msg *msg = &msgs[m];
        /* This message's container: a dummy waiting for its id is filled;
         * no id or an id a message already has gets a container of its own. */
        size_t self = NONE;
        size_t pos = 0;
        const char *mid = msg->message_id;
        if (mid != NULL && imap_thread_next_msgid(mid, strlen(mid), &pos, &id)) {
            size_t *slot = id_slot(&tb, buf_cstr(&id), true);
            if (*slot == NONE)
                *slot = container_new(t, m);
            else if (t->c[*slot].msg == NONE)
                t->c[*slot].msg = m;
            else
                slot = NULL;
            if (slot != NULL)
                self = *slot;
        }
        if (self == NONE)
            self = container_new(t, m);
        /* References, or the first id of In-Reply-To when it has none. */
        size_t nrefs = 0;
        if (msg->references != NULL) {
            pos = 0;
            size_t len = strlen(msg->references);
            while (imap_thread_next_msgid(msg->references, len, &pos, &id)) {
                refs = xgrow(refs, &refs_cap, nrefs + 1, sizeof(*refs));
                refs[nrefs++] = ref_container(t, &tb, buf_cstr(&id));
            }
        }
        if (nrefs == 0 && msg->in_reply_to != NULL) {
            pos = 0;
            if (imap_thread_next_msgid(msg->in_reply_to, strlen(msg->in_reply_to), &pos, &id)) {
                refs = xgrow(refs, &refs_cap, 1, sizeof(*refs));
                refs[nrefs++] = ref_container(t, &tb, buf_cstr(&id));
            }
        }
        /* 1.A: each reference the parent of the next, unless the child has
         * a parent already or the link would make a loop. */
        for (size_t i = 0; i + 1 < nrefs; i++) {
            size_t parent = refs[i], child = refs[i + 1];
            if (t->c[child].parent == NONE && !is_under(t, parent, child))
                append_child(t, parent, child);
        }
        /* 1.B: the last reference becomes the parent, replacing any link a
         * truncated References elsewhere made; no references, no parent. */
        unlink_child(t, self);
        if (nrefs > 0 && !is_under(t, refs[nrefs - 1], self))
            append_child(t, refs[nrefs - 1], self);
    }
    free(refs);
    buf_free(&id);
    id_table_free(&tb); /* step 3 */
}

/* Step 4: dummies below the root are replaced by their children; at the
 * root an empty dummy goes and one with a single child yields to it. The
 * links are rewired in place, so no recursion is needed. */
static void prune(struct tree *t)
{
    for (size_t x = 0; x < t->count; x++) {
        struct container *c = &t->c[x];
        if (c->msg != NONE || c->parent == NONE)
            continue;
        /* Splice x's children into x's place among its siblings. */
        size_t p = c->parent;
        size_t *link = &t->c[p].first_child;
        while (*link != x)
            link = &t->c[*link].next_sibling;
        size_t after = c->next_sibling;
        size_t kid = c->first_child;
        if (kid == NONE) {
            *link = after;
        } else {
            *link = kid;
            size_t last = kid;
            for (size_t k = kid; k != NONE; k = t->c[k].next_sibling) {
                t->c[k].parent = p;
                last = k;
            }
            t->c[last].next_sibling = after;
        }
        c->deleted = true;
        c->parent = c->first_child = c->next_sibling = NONE;
    }
    for (size_t x = 0; x < t->count; x++) {
        struct container *c = &t->c[x];
        if (c->deleted || c->msg != NONE || c->parent != NONE)
            continue;
        size_t kid = c->first_child;
        if (kid == NONE) {
            c->deleted = true;
        } else if (t->c[kid].next_sibling == NONE) {
            t->c[kid].parent = NONE;
            c->deleted = true;
            c->first_child = NONE;
        }
    }
}

struct sort_ctx {
    const struct tree *t;
    const struct imap_thread_msg *msgs;
};

/* A container's sort position: its message, or a dummy's first child. */
static size_t sort_msg(const struct tree *t, size_t x)
{
    while (t->c[x].msg == NONE && t->c[x].first_child != NONE)
        x = t->c[x].first_child;
    return t->c[x].msg;
}

static int by_date(const struct sort_ctx *c, size_t a, size_t b)
{
    size_t ma = sort_msg(c->t, a), mb = sort_msg(c->t, b);
    if (ma == NONE || mb == NONE)
        return ma == mb ? 0 : ma == NONE ? 1 : -1;
    if (c->msgs[ma].date != c->msgs[mb].date)
        return c->msgs[ma].date < c->msgs[mb].date ? -1 : 1;
    return ma < mb ? -1 : ma > mb ? 1 : 0;
}

static int by_date_sort(const void *a, const void *b, void *ctx)
{
    return by_date(ctx, *(const size_t *)a, *(const size_t *)b);
}

static void sort_by_date(const struct sort_ctx *c, size_t *v, size_t n)
{
    stable_sort(v, n, sizeof(*v), by_date_sort, (void *)c);
}

/* Sorts the children of `parent` by sent date in place. */
static void sort_children(const struct sort_ctx *c, struct tree *t, size_t parent)
{
    size_t n = 0;
    for (size_t k = t->c[parent].first_child; k != NONE; k = t->c[k].next_sibling)
        n++;
    if (n < 2)
        return;
    size_t *v = xcalloc(n, sizeof(*v));
    n = 0;
    for (size_t k = t->c[parent].first_child; k != NONE; k = t->c[k].next_sibling)
        v[n++] = k;
    sort_by_date(c, v, n);
    t->c[parent].first_child = v[0];
    for (size_t i = 0; i < n; i++)
        t->c[v[i]].next_sibling = i + 1 < n ? v[i + 1] : NONE;
    free(v);
}

/* Step 6 helper: makes `child` (a root) the last child of `parent`. */
static void adopt(struct tree *t, size_t parent, size_t child)
{
    append_child(t, parent, child);
}

/* The thread subject of a root: its message's, or its first child's. */
static const struct subj *thread_subject(const struct tree *t, const struct subj *subj, size_t root)
{
    size_t m = t->c[root].msg;
    if (m == NONE && t->c[root].first_child != NONE)
        m = t->c[t->c[root].first_child].msg;
    return m == NONE ? NULL : &subj[m];
}

/* Steps 5 and 6 over the root set `roots` (rewritten: merged roots gone). */
static void group_by_subject(struct tree *t, const struct sort_ctx *sc, const struct subj *subj,
                             size_t **roots_io, size_t *nroots_io)
{
    size_t *roots = *roots_io;
    size_t nroots = *nroots_io;
    /* 5: dummies' children first, so a dummy sorts by its first child. */
    for (size_t i = 0; i < nroots; i++) {
        if (t->c[roots[i]].msg == NONE)
            sort_children(sc, t, roots[i]);
    }
    sort_by_date(sc, roots, nroots);
    /* 6.A/B: one root per base subject. */
    struct id_table table = {0};
    for (size_t i = 0; i < nroots; i++) {
        const struct subj *s = thread_subject(t, subj, roots[i]);
        if (s == NULL || s->base[0] == '\0')
            continue;
        size_t *slot = id_slot(&table, s->base, true);
        if (*slot == NONE) {
            *slot = roots[i];
            continue;
        }
        size_t old = *slot;
        if (t->c[old].msg != NONE &&
            (t->c[roots[i]].msg == NONE ||
             (subj[t->c[old].msg].reply && !subj[t->c[roots[i]].msg].reply)))
            *slot = roots[i];
    }
    /* 6.C: merge the others into the table's. */
    size_t kept = 0;
    size_t *out = xcalloc(nroots + 1, sizeof(*out));
    for (size_t i = 0; i < nroots; i++) {
        size_t cur = roots[i];
        const struct subj *s = thread_subject(t, subj, cur);
        size_t *slot = s != NULL && s->base[0] != '\0' ? id_slot(&table, s->base, false) : NULL;
        if (slot == NULL || *slot == cur) {
            out[kept++] = cur;
            continue;
        }
        size_t tab = *slot;
        bool cur_dummy = t->c[cur].msg == NONE, tab_dummy = t->c[tab].msg == NONE;
        if (cur_dummy && tab_dummy) {
            size_t kid;
            while ((kid = t->c[cur].first_child) != NONE) {
                unlink_child(t, kid);
                adopt(t, tab, kid);
            }
            t->c[cur].deleted = true;
        } else if (tab_dummy && !cur_dummy) {
            adopt(t, tab, cur);
        } else if (!cur_dummy && subj[t->c[cur].msg].reply &&
                   !(t->c[tab].msg != NONE && subj[t->c[tab].msg].reply)) {
            adopt(t, tab, cur);
        } else {
            /* A new dummy takes the table's place among the roots. */
            size_t dummy = container_new(t, NONE);
            for (size_t k = 0; k < kept; k++) {
                if (out[k] == tab)
                    out[k] = dummy;
            }
            for (size_t k = i + 1; k < nroots; k++) {
                if (roots[k] == tab)
                    roots[k] = dummy;
            }
            adopt(t, dummy, tab);
            adopt(t, dummy, cur);
            *slot = dummy;
        }
    }
    id_table_free(&table);
    free(roots);
    *roots_io = out;
    *nroots_io = kept;
}

/* Appends one thread with an explicit stack (a reply chain can be as deep
 * as the mailbox is large). */
static void format_thread(const struct tree *t, const struct imap_thread_msg *msgs, size_t root,
                          struct buf *out)
{
    enum { EMIT, TEXT_SP, TEXT_OPEN, TEXT_CLOSE };
    struct item {
        int what;
        size_t node;
    } *stack = NULL;
    size_t depth = 0, cap = 0;
    stack = xgrow(stack, &cap, 1, sizeof(*stack));
    stack[depth++] = (struct item){EMIT, root};
    while (depth > 0) {
        struct item it = stack[--depth];
        if (it.what == TEXT_SP) {
            buf_append_char(out, ' ');
            continue;
        }
        if (it.what == TEXT_OPEN) {
            buf_append_char(out, '(');
            continue;
        }
        if (it.what == TEXT_CLOSE) {
            buf_append_char(out, ')');
            continue;
        }
        const struct container *c = &t->c[it.node];
        bool dummy = c->msg == NONE;
        if (!dummy)
            buf_printf(out, "%u", msgs[c->msg].number);
        size_t n = 0;
        for (size_t k = c->first_child; k != NONE; k = t->c[k].next_sibling)
            n++;
        if (n == 0)
            continue;
        if (n == 1 && !dummy) {
            stack = xgrow(stack, &cap, depth + 2, sizeof(*stack));
            stack[depth++] = (struct item){EMIT, c->first_child};
            stack[depth++] = (struct item){TEXT_SP, 0};
            continue;
        }
        if (!dummy)
            buf_append_char(out, ' ');
        stack = xgrow(stack, &cap, depth + 3 * n, sizeof(*stack));
        /* Pushed last child first, so they come out in order. */
        size_t base = depth;
        depth += 3 * n;
        size_t i = 0;
        for (size_t k = c->first_child; k != NONE; k = t->c[k].next_sibling, i++) {
            size_t at = base + 3 * (n - 1 - i);
            stack[at] = (struct item){TEXT_CLOSE, 0};
            stack[at + 1] = (struct item){EMIT, k};
            stack[at + 2] = (struct item){TEXT_OPEN, 0};
        }
    }
    free(stack);
}

void imap_thread_references(const struct imap_thread_msg *msgs, size_t count, struct buf *out)
{
    if (count == 0)
        return;
    struct tree t = {.budget = LOOP_CHECK_BUDGET};
    build_links(&t, msgs, count);
    prune(&t);
    /* Step 2: the root set. */
    size_t nroots = 0;
    size_t *roots = xcalloc(t.count + 1, sizeof(*roots));
    for (size_t x = 0; x < t.count; x++) {
        if (!t.c[x].deleted && t.c[x].parent == NONE)
            roots[nroots++] = x;
    }
    struct subj *subj = xcalloc(count, sizeof(*subj));
    subjects_make(msgs, count, subj);
    struct sort_ctx sc = {&t, msgs};
    group_by_subject(&t, &sc, subj, &roots, &nroots);
    /* Step 7: every set of siblings by sent date; the roots last, since a
     * dummy sorts by its first child. */
    for (size_t x = 0; x < t.count; x++) {
        if (!t.c[x].deleted)
            sort_children(&sc, &t, x);
    }
    sort_by_date(&sc, roots, nroots);
    for (size_t i = 0; i < nroots; i++) {
        buf_append_char(out, '(');
        format_thread(&t, msgs, roots[i], out);
        buf_append_char(out, ')');
    }
    free(roots);
    subjects_free(subj, count);
    free(t.c);
}

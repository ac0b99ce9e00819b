/* Quota rule parsing (see quota-rule.h for the grammar). */
#include "storage/quota/quota-rule.h"

#include "core/slice.h"
#include "core/xalloc.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

static bool unit_shift(char c, unsigned *shift)
{
    switch (c) {
    case 'k':
    case 'K':
        *shift = 10;
        return true;
    case 'm':
    case 'M':
        *shift = 20;
        return true;
    case 'g':
    case 'G':
        *shift = 30;
        return true;
    case 't':
    case 'T':
        *shift = 40;
        return true;
    default:
        return false;
    }
}

bool quota_size_parse(const char *text, size_t len, uint64_t *out)
{
    size_t i = 0;
    uint64_t v = 0;
    if (text == NULL || len == 0)
        return false;
    while (i < len && text[i] >= '0' && text[i] <= '9') {
        unsigned d = (unsigned)(text[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
        i++;
    }
    if (i == 0)
        return false;
    unsigned shift = 0;
    if (i < len && unit_shift(text[i], &shift))
        i++;
    if (i < len && (text[i] == 'b' || text[i] == 'B'))
        i++;
    if (i != len)
        return false;
    if (shift > 0 && v > (UINT64_MAX >> shift))
        return false;
    *out = v << shift;
    return true;
}

void quota_rules_init(struct quota_rules *r)
{
    memset(r, 0, sizeof(*r));
}

void quota_rules_free(struct quota_rules *r)
{
    for (size_t i = 0; i < r->box_count; i++)
        free(r->boxes[i].pattern);
    free(r->boxes);
    memset(r, 0, sizeof(*r));
}

static bool fail(struct petrel_error *err, const char *rule, size_t len, const char *why)
{
    int shown = len > 80 ? 80 : (int)len;
    return petrel_error_set(err, PETREL_ERR_INVALID, "quota rule '%.*s%s': %s", shown, rule,
                            len > 80 ? "..." : "", why);
}

/* A mailbox rule for exactly `pattern` (the last one: later rules win), made
 * when absent. NULL when the cap is reached. */
static struct quota_mailbox_rule *box_rule(struct quota_rules *r, const char *pattern, size_t len)
{
    for (size_t i = r->box_count; i-- > 0;) {
        if (strlen(r->boxes[i].pattern) == len && memcmp(r->boxes[i].pattern, pattern, len) == 0)
            return &r->boxes[i];
    }
    if (r->box_count >= QUOTA_MAX_RULES)
        return NULL;
    r->boxes = xrealloc(r->boxes, (r->box_count + 1) * sizeof(*r->boxes));
    struct quota_mailbox_rule *b = &r->boxes[r->box_count++];
    memset(b, 0, sizeof(*b));
    b->pattern = xstrndup(pattern, len);
    return b;
}

static bool parse_resource(const char *p, size_t len, enum quota_resource *res)
{
    if ((len == 7 && strncasecmp(p, "storage", 7) == 0) ||
        (len == 5 && strncasecmp(p, "bytes", 5) == 0)) {
        *res = QUOTA_RES_STORAGE;
        return true;
    }
    if (len == 8 && strncasecmp(p, "messages", 8) == 0) {
        *res = QUOTA_RES_MESSAGES;
        return true;
    }
    return false;
}

/* "<resource>=<limit>" into spec; `wild` says whether the mailbox is `*`. */
static bool parse_item(const char *rule, size_t rule_len, const char *p, size_t len, bool wild,
                       enum quota_resource *res, struct quota_limit_spec *spec,
                       struct petrel_error *err)
{
    const char *eq = memchr(p, '=', len);
    if (eq == NULL)
        return fail(err, rule, rule_len, "expected <resource>=<limit>");
    if (!parse_resource(p, (size_t)(eq - p), res))
        return fail(err, rule, rule_len, "unknown resource (storage or messages)");
    const char *v = eq + 1;
    size_t vlen = len - (size_t)(v - p);
    spec->kind = QUOTA_LIMIT_ABSOLUTE;
    if (vlen > 0 && (v[0] == '+' || v[0] == '-')) {
        spec->kind = v[0] == '+' ? QUOTA_LIMIT_PLUS : QUOTA_LIMIT_MINUS;
        v++;
        vlen--;
    } else if (vlen > 0 && v[vlen - 1] == '%') {
        spec->kind = QUOTA_LIMIT_PERCENT;
        vlen--;
    }
    if (spec->kind != QUOTA_LIMIT_ABSOLUTE && wild)
        return fail(err, rule, rule_len,
                    "relative and percentage limits are for named mailboxes, not '*'");
    bool ok = quota_size_parse(v, vlen, &spec->value);
    if (spec->kind == QUOTA_LIMIT_PERCENT) { /* digits only: no unit on a percentage */
        for (size_t i = 0; ok && i < vlen; i++)
            ok = v[i] >= '0' && v[i] <= '9';
        ok = ok && spec->value <= 100000;
    }
    if (!ok)
        return fail(err, rule, rule_len,
                    "bad limit (an integer with an optional K, M, G or T unit)");
    return true;
}

static bool valid_pattern(const char *p, size_t len)
{
    if (len == 0 || len > 1024)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c < 0x20 || c == 0x7f)
            return false;
    }
    return true;
}

static bool parse_rule(struct quota_rules *r, const char *rule, size_t len,
                       struct petrel_error *err)
{
    const char *colon = memchr(rule, ':', len);
    const char *eq = memchr(rule, '=', len);
    const char *items = rule;
    size_t items_len = len;
    const char *box = "*";
    size_t box_len = 1;
    /* A ':' before the first '=' ends the mailbox part. */
    if (colon != NULL && (eq == NULL || colon < eq)) {
        box = rule;
        box_len = (size_t)(colon - rule);
        items = colon + 1;
        items_len = len - box_len - 1;
        if (!valid_pattern(box, box_len))
            return fail(err, rule, len, "bad mailbox name");
    }
    bool wild = box_len == 1 && box[0] == '*';
    if (items_len == 6 && strncasecmp(items, "ignore", 6) == 0) {
        if (wild)
            return fail(err, rule, len, "'*' cannot be ignored");
        struct quota_mailbox_rule *b = box_rule(r, box, box_len);
        if (b == NULL)
            return fail(err, rule, len, "too many mailbox rules");
        b->ignore = true;
        return true;
    }
    if (items_len == 0)
        return fail(err, rule, len, "expected <resource>=<limit>");
    /* Dovecot's `*:storage=1G:messages=1000`: several items after one mailbox. */
    while (items_len > 0) {
        const char *sep = memchr(items, ':', items_len);
        size_t n = sep != NULL ? (size_t)(sep - items) : items_len;
        enum quota_resource res = QUOTA_RES_STORAGE;
        struct quota_limit_spec spec;
        if (!parse_item(rule, len, items, n, wild, &res, &spec, err))
            return false;
        if (wild) {
            r->limit[res] = spec.value;
        } else {
            struct quota_mailbox_rule *b = box_rule(r, box, box_len);
            if (b == NULL)
                return fail(err, rule, len, "too many mailbox rules");
            b->limit[res] = spec;
        }
        if (sep == NULL)
            break;
        items = sep + 1;
        items_len -= n + 1;
        if (items_len == 0)
            return fail(err, rule, len, "empty item after ':'");
    }
    return true;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t';
}

bool quota_rules_add(struct quota_rules *r, const char *text, struct petrel_error *err)
{
    size_t len = strlen(text);
    if (len > QUOTA_MAX_RULE_TEXT)
        return petrel_error_set(err, PETREL_ERR_INVALID, "quota rule longer than %d bytes",
                                QUOTA_MAX_RULE_TEXT);
    const char *p = text;
    const char *end = text + len;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma != NULL ? comma : end;
        const char *a = p;
        const char *b = stop;
        while (a < b && is_space(*a))
            a++;
        while (b > a && is_space(b[-1]))
            b--;
        /* Empty items (",," or a trailing comma) are skipped, as the
         * userdb's comma lists are. */
        if (b > a && !parse_rule(r, a, (size_t)(b - a), err))
            return false;
        p = stop + (comma != NULL ? 1 : 0);
    }
    return true;
}

bool quota_rules_add_list(struct quota_rules *r, char *const *fields, struct petrel_error *err)
{
    for (size_t i = 0; fields != NULL && fields[i] != NULL; i++) {
        if (!quota_rules_add(r, fields[i], err))
            return false;
    }
    return true;
}

bool quota_rules_add_lines(struct quota_rules *r, const char *text, struct petrel_error *err)
{
    while (*text != '\0') {
        const char *nl = strchr(text, '\n');
        size_t len = nl != NULL ? (size_t)(nl - text) : strlen(text);
        if (len > 0) {
            char *field = xstrndup(text, len);
            bool ok = quota_rules_add(r, field, err);
            free(field);
            if (!ok)
                return false;
        }
        text += len + (nl != NULL ? 1 : 0);
    }
    return true;
}

bool quota_mailbox_match(const char *pattern, const char *mailbox)
{
    if (strcasecmp(mailbox, "INBOX") == 0 && strcasecmp(pattern, "INBOX") == 0)
        return true;
    return str_glob_match(pattern, mailbox, false);
}

bool quota_rules_mailbox_ignored(const struct quota_rules *r, const char *mailbox)
{
    for (size_t i = r->box_count; i-- > 0;) {
        if (r->boxes[i].ignore && quota_mailbox_match(r->boxes[i].pattern, mailbox))
            return true;
    }
    return false;
}

static uint64_t sat_mul_div(uint64_t v, uint64_t mul, uint64_t div)
{
    if (mul != 0 && v > UINT64_MAX / mul) {
        /* loses the remainder only where it cannot matter; saturates
         * where even the quotient times `mul` is beyond 64 bits */
        uint64_t q = v / div;
        return q > UINT64_MAX / mul ? UINT64_MAX : q * mul;
    }
    return v * mul / div;
}

uint64_t quota_rules_limit(const struct quota_rules *r, enum quota_resource res,
                           const char *mailbox)
{
    uint64_t base = r->limit[res];
    if (mailbox == NULL)
        return base;
    for (size_t i = r->box_count; i-- > 0;) {
        const struct quota_limit_spec *s = &r->boxes[i].limit[res];
        if (s->kind == QUOTA_LIMIT_UNSET || !quota_mailbox_match(r->boxes[i].pattern, mailbox))
            continue;
        if (s->kind == QUOTA_LIMIT_ABSOLUTE)
            return s->value;
        if (base == 0)
            return 0; /* relative to unlimited stays unlimited */
        uint64_t v;
        switch (s->kind) {
        case QUOTA_LIMIT_PLUS:
            v = base > UINT64_MAX - s->value ? UINT64_MAX : base + s->value;
            break;
        case QUOTA_LIMIT_MINUS:
            v = base > s->value ? base - s->value : 1;
            break;
        default:
            v = sat_mul_div(base, s->value, 100);
            break;
        }
        return v == 0 ? 1 : v; /* a limit, never "unlimited" by rounding */
    }
    return base;
}

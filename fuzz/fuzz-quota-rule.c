/* libFuzzer target: the quota_rule grammar (storage/quota/quota-rule.h).
 * Input: text (made NUL-terminated; an embedded NUL ends it), split at
 * '\n' into userdb fields (quota_rule, quota_rule2, ...).
 *   - parsing either succeeds or fails with INVALID and a message;
 *   - a set that parsed has at most QUOTA_MAX_RULES mailbox rules, each
 *     with a non-empty pattern, and limits that are computable for any
 *     mailbox (no overflow: UBSan), with the formula too;
 *   - parsing the same fields again gives the same limits (deterministic);
 *   - quota_size_parse() of the whole input agrees with a reference
 *     decimal-and-unit reading. */
#include "storage/quota/quota-config.h"
#include "storage/quota/quota-limits.h"
#include "storage/quota/quota-rule.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

__extension__ typedef unsigned __int128 u128;

static void check_size(const char *text)
{
    size_t len = strlen(text);
    uint64_t v = 0;
    bool ok = quota_size_parse(text, len, &v);
    /* Reference: digits, optional unit letter, optional B, nothing else. */
    size_t i = 0;
    u128 acc = 0;
    bool ref = true;
    while (i < len && text[i] >= '0' && text[i] <= '9') {
        acc = acc * 10 + (unsigned)(text[i] - '0');
        if (acc > UINT64_MAX)
            ref = false;
        i++;
    }
    if (i == 0)
        ref = false;
    unsigned shift = 0;
    if (i < len && strchr("kKmMgGtT", text[i]) != NULL && text[i] != '\0') {
        shift = strchr("kK", text[i])   ? 10
                : strchr("mM", text[i]) ? 20
                : strchr("gG", text[i]) ? 30
                                        : 40;
        i++;
    }
    if (i < len && (text[i] == 'b' || text[i] == 'B'))
        i++;
    if (i != len)
        ref = false;
    if (ref && (acc << shift) > UINT64_MAX)
        ref = false;
    assert(ok == ref);
    if (ok)
        assert((u128)v == (acc << shift));
}

static void limits_of(const struct quota_rules *r, uint64_t out[6])
{
    static const char *const boxes[] = {"INBOX", "Trash", "a/b/c"};
    for (size_t i = 0; i < 3; i++) {
        out[2 * i] = quota_rules_limit(r, QUOTA_RES_STORAGE, boxes[i]);
        out[2 * i + 1] = quota_rules_limit(r, QUOTA_RES_MESSAGES, boxes[i]);
        (void)quota_rules_mailbox_ignored(r, boxes[i]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    check_size(text);

    char *copy = strdup(text);
    char *fields[17];
    size_t n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, "\n", &save); tok != NULL && n < 16;
         tok = strtok_r(NULL, "\n", &save))
        fields[n++] = tok;
    fields[n] = NULL;

    struct quota_rules r;
    quota_rules_init(&r);
    struct petrel_error err;
    memset(&err, 0, sizeof(err));
    bool ok = quota_rules_add_list(&r, fields, &err);
    if (!ok)
        assert(err.code == PETREL_ERR_INVALID && err.message[0] != '\0');
    assert(r.box_count <= QUOTA_MAX_RULES);
    for (size_t i = 0; i < r.box_count; i++)
        assert(r.boxes[i].pattern != NULL && r.boxes[i].pattern[0] != '\0');
    uint64_t a[6];
    limits_of(&r, a);

    struct quota_config cfg;
    quota_config_defaults(&cfg);
    cfg.storage_percentage = 1 + (int64_t)(size % 10000);
    cfg.storage_extra = size > 0 ? (uint64_t)data[0] << 56 : 0;
    struct quota_limits l;
    quota_limits_compute(&cfg, &r, "Trash", QUOTA_POINT_DELIVERY, &l);
    struct quota_usage u = {.storage = UINT64_MAX - 1, .messages = UINT64_MAX};
    (void)quota_check(&cfg, &l, &u, size, 1);
    quota_config_free(&cfg);

    if (ok) {
        struct quota_rules again;
        quota_rules_init(&again);
        assert(quota_rules_add_list(&again, fields, &err));
        uint64_t b[6];
        limits_of(&again, b);
        assert(memcmp(a, b, sizeof(a)) == 0);
        quota_rules_free(&again);
    }
    quota_rules_free(&r);
    free(copy);
    free(text);
    return 0;
}

/* The effective limit formula of document 3 (quota-limits.h). */
#include "storage/quota/quota-limits.h"

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t scale(uint64_t limit, int64_t percentage)
{
    if (limit == 0)
        return 0;
    uint64_t pct = percentage > 0 ? (uint64_t)percentage : 100;
    uint64_t v;
    if (limit <= UINT64_MAX / pct)
        v = limit * pct / 100;
    else /* dividing first can still overflow when pct > 100: saturate */
        v = limit / 100 > UINT64_MAX / pct ? UINT64_MAX : limit / 100 * pct;
    return v == 0 ? 1 : v;
}

void quota_limits_compute(const struct quota_config *cfg, const struct quota_rules *rules,
                          const char *mailbox, enum quota_point point, struct quota_limits *out)
{
    uint64_t storage = quota_rules_limit(rules, QUOTA_RES_STORAGE, mailbox);
    uint64_t messages = quota_rules_limit(rules, QUOTA_RES_MESSAGES, mailbox);
    out->storage = scale(storage, cfg->storage_percentage);
    if (out->storage != 0) {
        out->storage = add_sat(out->storage, cfg->storage_extra);
        if (point == QUOTA_POINT_DELIVERY)
            out->storage = add_sat(out->storage, cfg->storage_grace);
    }
    out->messages = scale(messages, cfg->message_percentage);
}

enum quota_verdict quota_check(const struct quota_config *cfg, const struct quota_limits *limits,
                               const struct quota_usage *usage, uint64_t add_bytes,
                               uint64_t add_messages)
{
    if (cfg->mail_size != 0 && add_bytes > cfg->mail_size)
        return QUOTA_TOO_LARGE;
    if (limits->storage != 0) {
        if (add_bytes == 0 ? usage->storage >= limits->storage
                           : add_sat(usage->storage, add_bytes) > limits->storage)
            return QUOTA_OVER_STORAGE;
    }
    if (limits->messages != 0 && add_sat(usage->messages, add_messages) > limits->messages)
        return QUOTA_OVER_MESSAGES;
    return QUOTA_OK;
}

#include "net/backoff.h"

void net_backoff_init(struct net_backoff *b, int64_t min_ms, int64_t max_ms)
{
    b->min_ms = min_ms > 0 ? min_ms : 1;
    b->max_ms = max_ms >= b->min_ms ? max_ms : b->min_ms;
    b->wait_ms = 0;
    b->retry_at_ms = 0;
}

int64_t net_backoff_failed(struct net_backoff *b, int64_t now_ms)
{
    if (b->wait_ms == 0)
        b->wait_ms = b->min_ms;
    else
        b->wait_ms = b->wait_ms > b->max_ms / 2 ? b->max_ms : b->wait_ms * 2;
    b->retry_at_ms = now_ms + b->wait_ms;
    return b->wait_ms;
}

void net_backoff_reset(struct net_backoff *b)
{
    b->wait_ms = 0;
    b->retry_at_ms = 0;
}

int64_t net_backoff_remaining(const struct net_backoff *b, int64_t now_ms)
{
    return b->retry_at_ms > now_ms ? b->retry_at_ms - now_ms : 0;
}

/* Failed-login protection: failures are counted per client IP (and, by the
 * auth service, per user). Only a failure is delayed: its reply waits the
 * failure delay plus a penalty that doubles with the IP's earlier failures
 * up to a cap, while a correct password is answered at once. A count
 * resets after a quiet period; while it is at the configured maximum,
 * further attempts are refused without checking the password. 
 * Where the counts live is pluggable: this module keeps them in the
 * process (auth_penalty_local_store); the warden (a separate component)
 * provides a store shared by every auth instance through the same hooks. */
#ifndef PETREL_CLIENTS_AUTH_PENALTY_H
#define PETREL_CLIENTS_AUTH_PENALTY_H

#include <stdint.h>

struct auth_penalty_config {
    int64_t failure_delay_ms; /* reply delay of a failed attempt, and the first step */
    int64_t max_delay_ms;     /* cap of the wait before an attempt */
    int64_t decay_ms;         /* a quiet IP's count resets after this */
    int64_t max_tracked_ips;  /* local store size; the oldest entry goes first */
    int64_t max_ip_failures;   /* attempts refused unchecked at this count; 0 = no limit */
    int64_t max_user_failures; /* the same per user name; 0 = no limit */
};

typedef void auth_penalty_get_cb(unsigned failures, void *ctx);

/* A failure-count store. `get` may answer later (a remote store) or at
 * once; it must call `cb` exactly once. */
struct auth_penalty_store_ops {
    void (*get)(void *store, const char *ip, int64_t now_ms, auth_penalty_get_cb *cb, void *ctx);
    void (*inc)(void *store, const char *ip, int64_t now_ms);
    void (*free)(void *store);
};

struct auth_penalty_store {
    const struct auth_penalty_store_ops *ops;
    void *store;
};

/* The in-process store. */
struct auth_penalty_store auth_penalty_local_store(const struct auth_penalty_config *cfg);

/* The penalty added to the failure reply of an IP with `failures` earlier
 * failures: 0 for none, then failure_delay * 2^(failures-1), capped at
 * max_delay. */
int64_t auth_penalty_delay_ms(const struct auth_penalty_config *cfg, unsigned failures);

#endif

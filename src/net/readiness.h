/* Readiness checks: named probes run concurrently under one deadline.
 * Built-in probe: TCP connect to an address, completing a TLS handshake when
 * the port speaks TLS. Components add custom probes (asynchronous: the probe
 * calls readiness_probe_done() exactly once, possibly after the deadline,
 * when its answer is ignored). The latest result of each check is mirrored
 * into the gauge petrel_readiness_check{check}. */
#ifndef PETREL_NET_READINESS_H
#define PETREL_NET_READINESS_H

#include "core/metrics.h"

#include <event2/event.h>
#include <openssl/ssl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct readiness;
struct readiness_probe;

struct readiness_result {
    const char *name;
    bool ok;
    const char *error; /* NULL when ok */
};

typedef void (*readiness_probe_fn)(struct readiness_probe *probe, void *ctx);
typedef void (*readiness_done_fn)(const struct readiness_result *results, size_t count,
                                  bool ready, void *ctx);

struct readiness *readiness_new(struct event_base *base, struct metrics_registry *metrics);
void readiness_free(struct readiness *r);

/* TCP (and TLS when `tls` is set) check of `addr`. With a client
 * certificate the handshake also passes an mTLS listener. */
void readiness_add_tcp(struct readiness *r, const char *name, const char *addr, bool tls,
                       const char *client_cert, const char *client_key);
void readiness_add_probe(struct readiness *r, const char *name, readiness_probe_fn fn, void *ctx);
size_t readiness_count(const struct readiness *r);

/* Runs every check; `done` is called once, when all have answered or at
 * the deadline (unanswered checks fail with "deadline exceeded"). An empty
 * set of checks is ready at once. */
void readiness_run(struct readiness *r, int64_t deadline_ms, readiness_done_fn done, void *ctx);
void readiness_probe_done(struct readiness_probe *probe, bool ok, const char *error);

#endif

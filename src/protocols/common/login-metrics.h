/* The login proxy's metrics (docs/login-proxy.md, docs/logging-and-telemetry.md),
 * shared by its IMAP, POP3 and LMTP fronts: each front registers the
 * families with its protocol label (registering again returns the same
 * family, core/metrics.h) and keeps its series here for the hot path.
 *
 *   petrel_login_phase_seconds{protocol,phase}           histogram
 *   petrel_login_result_total{protocol,result}           counter
 *   petrel_login_sessions{protocol}                      gauge
 *   petrel_login_transient_retries_total{protocol,stage} counter
 *   petrel_login_transient_exhausted_total{protocol,stage} counter
 *
 * Every series of a protocol is created at registration, so each reads 0
 * before its first event. */
#ifndef PETREL_PROTOCOLS_COMMON_LOGIN_METRICS_H
#define PETREL_PROTOCOLS_COMMON_LOGIN_METRICS_H

#include "core/metrics.h"

#include <stdint.h>

enum login_phase {
    LOGIN_PHASE_TLS_HANDSHAKE,
    LOGIN_PHASE_PREAMBLE,
    LOGIN_PHASE_AUTH_DIAL, /* observed on failure too */
    LOGIN_PHASE_AUTH,      /* per attempt */
    LOGIN_PHASE_DIRECTOR_LOOKUP,
    LOGIN_PHASE_WARDEN_CONNECT,
    LOGIN_PHASE_BACKEND_DIAL,
    LOGIN_PHASE_BACKEND_PREAMBLE,
    LOGIN_PHASE_COUNT,
};

enum login_result {
    LOGIN_RESULT_OK,
    LOGIN_RESULT_UNAVAILABLE,
    LOGIN_RESULT_BACKEND_REJECTED,
    LOGIN_RESULT_PREAMBLE_ERROR,
    LOGIN_RESULT_TLS_ERROR,
    LOGIN_RESULT_COUNT,
};

enum login_stage {
    LOGIN_STAGE_AUTH_DIAL,
    LOGIN_STAGE_AUTH,
    LOGIN_STAGE_BACKEND_SESSION,
    LOGIN_STAGE_COUNT,
};

struct login_metrics {
    struct metric_series *phase[LOGIN_PHASE_COUNT];
    struct metric_series *result[LOGIN_RESULT_COUNT];
    struct metric_series *sessions;
    struct metric_series *retries[LOGIN_STAGE_COUNT];
    struct metric_series *exhausted[LOGIN_STAGE_COUNT];
};

/* Registers the families (or finds them) and fills `m` with the series of
 * `protocol` ("imap", "pop3", "lmtp"). */
void login_metrics_register(struct metrics_registry *reg, const char *protocol,
                            struct login_metrics *m);

/* The label values, for logs too. */
const char *login_phase_name(enum login_phase phase);
const char *login_result_name(enum login_result result);
const char *login_stage_name(enum login_stage stage);

/* Observes a phase that started at `started_us` (core/clock.h monotonic
 * microseconds) and ended now. */
void login_metrics_phase(const struct login_metrics *m, enum login_phase phase, int64_t started_us);
/* Counts one outcome. */
void login_metrics_result(const struct login_metrics *m, enum login_result result);
/* Counts one retry of `stage`, or the budget of `stage` running out. */
void login_metrics_retry(const struct login_metrics *m, enum login_stage stage);
void login_metrics_exhausted(const struct login_metrics *m, enum login_stage stage);
/* One proxied session more (+1) or fewer (-1). */
void login_metrics_sessions_add(const struct login_metrics *m, int delta);

#endif

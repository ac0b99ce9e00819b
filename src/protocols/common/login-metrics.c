/* The login proxy's metrics: names and labels exactly as document 2 gives
 * them (svc_ -> petrel_). */
#include "protocols/common/login-metrics.h"

#include "core/clock.h"

#include <stddef.h>

static const char *const phase_names[LOGIN_PHASE_COUNT] = {
    "tls_handshake",   "preamble",       "auth_dial",    "auth",
    "director_lookup", "warden_connect", "backend_dial", "backend_preamble",
};
static const char *const result_names[LOGIN_RESULT_COUNT] = {
    "ok", "unavailable", "backend_rejected", "preamble_error", "tls_error",
};
static const char *const stage_names[LOGIN_STAGE_COUNT] = {"auth_dial", "auth", "backend_session"};

/* From a loopback auth answer (~100 us) to a backend timeout (10 s). */
static const double phase_bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                      0.1,    0.25,  0.5,    1,     2.5,  5,     10};

const char *login_phase_name(enum login_phase phase)
{
    return phase < LOGIN_PHASE_COUNT ? phase_names[phase] : "unknown";
}

const char *login_result_name(enum login_result result)
{
    return result < LOGIN_RESULT_COUNT ? result_names[result] : "unknown";
}

const char *login_stage_name(enum login_stage stage)
{
    return stage < LOGIN_STAGE_COUNT ? stage_names[stage] : "unknown";
}

void login_metrics_register(struct metrics_registry *reg, const char *protocol,
                            struct login_metrics *m)
{
    static const char *const phase_labels[] = {"protocol", "phase", NULL};
    static const char *const result_labels[] = {"protocol", "result", NULL};
    static const char *const proto_labels[] = {"protocol", NULL};
    static const char *const stage_labels[] = {"protocol", "stage", NULL};
    struct metric_family *phase = metrics_histogram(
        reg, "petrel_login_phase_seconds",
        "Time spent in each phase of a proxied login (auth_dial also when it fails).", phase_labels,
        phase_bounds, sizeof(phase_bounds) / sizeof(phase_bounds[0]));
    struct metric_family *result =
        metrics_counter(reg, "petrel_login_result_total",
                        "Outcomes of proxied logins: ok, unavailable, backend_rejected, "
                        "preamble_error, tls_error.",
                        result_labels);
    struct metric_family *sessions = metrics_gauge(
        reg, "petrel_login_sessions", "Proxied sessions open (after login).", proto_labels);
    struct metric_family *retries =
        metrics_counter(reg, "petrel_login_transient_retries_total",
                        "Retries of a temporary failure during a proxied login.", stage_labels);
    struct metric_family *exhausted = metrics_counter(
        reg, "petrel_login_transient_exhausted_total",
        "Proxied logins that failed after using up login.transient_retries.", stage_labels);
    for (size_t i = 0; i < LOGIN_PHASE_COUNT; i++)
        m->phase[i] = metric_series_get(phase, (const char *const[]){protocol, phase_names[i]});
    for (size_t i = 0; i < LOGIN_RESULT_COUNT; i++)
        m->result[i] = metric_series_get(result, (const char *const[]){protocol, result_names[i]});
    m->sessions = metric_series_get(sessions, (const char *const[]){protocol});
    for (size_t i = 0; i < LOGIN_STAGE_COUNT; i++) {
        m->retries[i] = metric_series_get(retries, (const char *const[]){protocol, stage_names[i]});
        m->exhausted[i] =
            metric_series_get(exhausted, (const char *const[]){protocol, stage_names[i]});
    }
}

void login_metrics_phase(const struct login_metrics *m, enum login_phase phase, int64_t started_us)
{
    if (phase >= LOGIN_PHASE_COUNT || m->phase[phase] == NULL)
        return;
    int64_t us = clock_mono_us() - started_us;
    metric_observe(m->phase[phase], us > 0 ? (double)us / 1e6 : 0.0);
}

void login_metrics_result(const struct login_metrics *m, enum login_result result)
{
    if (result < LOGIN_RESULT_COUNT && m->result[result] != NULL)
        metric_add(m->result[result], 1);
}

void login_metrics_retry(const struct login_metrics *m, enum login_stage stage)
{
    if (stage < LOGIN_STAGE_COUNT && m->retries[stage] != NULL)
        metric_add(m->retries[stage], 1);
}

void login_metrics_exhausted(const struct login_metrics *m, enum login_stage stage)
{
    if (stage < LOGIN_STAGE_COUNT && m->exhausted[stage] != NULL)
        metric_add(m->exhausted[stage], 1);
}

void login_metrics_sessions_add(const struct login_metrics *m, int delta)
{
    if (m->sessions != NULL)
        metric_gauge_add(m->sessions, delta);
}

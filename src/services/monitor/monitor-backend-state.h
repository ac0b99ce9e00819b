/* The monitor's per-backend decision: when a run of failed probes makes a
 * backend `flush` and when a success brings it back `up`. Pure: no sockets,
 * no clocks, no allocation; the service feeds it poll results and the
 * director's view and does what it answers (docs/monitor.md#state-machine).
 *
 * A *poll* is one probe of every enabled protocol; it fails when any of
 * them fails. The readings of specification document 2 this implements:
 *
 * - normal polls run every `interval`; each failure adds one to a count of
 *   consecutive failures, each success resets it;
 * - when the count reaches `retry_count` (and the backend is not flush
 *   already), the backend enters the rapid phase: exactly `rapid_rounds`
 *   rapid polls, every `rapid_interval`, all of them performed;
 * - after the last rapid poll: when the failures among them *reach*
 *   `rapid_fails_needed` (failures >= rapid_fails_needed) the backend is
 *   flushed and BACKEND-FLUSH is reported once; otherwise it returns to
 *   normal polling with a count of zero;
 * - `rapid_rounds` = 0 skips the rapid phase: the `retry_count`-th
 *   consecutive failure flushes at once;
 * - a flush backend keeps being polled every `interval` (never rapidly); its
 *   first successful poll reports BACKEND-UP when `restore` allows it (any
 *   flush backend, or only one this monitor flushed itself);
 * - the director's own changes win: a backend the director reports `up`
 *   (an operator, or the echo of BACKEND-UP) starts afresh; one it reports
 *   `flush` that this monitor did not flush leaves the rapid phase. */
#ifndef PETREL_SERVICES_MONITOR_BACKEND_STATE_H
#define PETREL_SERVICES_MONITOR_BACKEND_STATE_H

#include <stdbool.h>
#include <stdint.h>

struct monitor_thresholds {
    int64_t retry_count;        /* >= 1 */
    int64_t rapid_rounds;       /* >= 0 */
    int64_t rapid_fails_needed; /* 1..rapid_rounds when rapid_rounds > 0 */
    bool restore_own_only;      /* BACKEND-UP only for backends flushed by this monitor */
};

/* What the service must send to the director after a poll. */
enum monitor_report {
    MONITOR_REPORT_NONE,
    MONITOR_REPORT_FLUSH, /* BACKEND-FLUSH <ip> */
    MONITOR_REPORT_UP,    /* BACKEND-UP <ip> */
};

/* When the next poll is due. */
enum monitor_poll_kind {
    MONITOR_POLL_NORMAL, /* `interval` after the previous poll started */
    MONITOR_POLL_RAPID,  /* `rapid_interval` after the previous poll ended */
};

/* The state for the metric label `state`. */
enum monitor_state_name {
    MONITOR_STATE_UP,      /* no failure in a row */
    MONITOR_STATE_FAILING, /* failures in a row, fewer than retry_count */
    MONITOR_STATE_RAPID,   /* in the rapid phase */
    MONITOR_STATE_FLUSH,   /* flush in the director's view (as far as this monitor knows) */
};

struct monitor_backend_state {
    struct monitor_thresholds th;
    bool flushed;       /* flush in the director's view (after our reports) */
    bool flushed_by_us; /* ... because this monitor reported BACKEND-FLUSH */
    bool rapid;         /* in the rapid phase */
    int64_t failures;   /* consecutive failed normal polls */
    int64_t rapid_done; /* rapid polls finished in this phase */
    int64_t rapid_failed;
    int64_t last_rapid_failed; /* failures of the last finished rapid phase */
};

/* Starts a backend the director announced `up` (flushed false) or `flush`. */
void monitor_state_init(struct monitor_backend_state *st, const struct monitor_thresholds *th,
                        bool flushed);
/* Feeds the result of one poll; returns the report to send (the state
 * already assumes it was sent). */
enum monitor_report monitor_state_poll_done(struct monitor_backend_state *st, bool success);
/* The kind of the next poll. */
enum monitor_poll_kind monitor_state_next_poll(const struct monitor_backend_state *st);
/* The director says the backend is `up` (flushed false) or `flush`. */
void monitor_state_director(struct monitor_backend_state *st, bool flushed);
enum monitor_state_name monitor_state_get(const struct monitor_backend_state *st);
/* "up", "failing", "rapid", "flush". */
const char *monitor_state_label(enum monitor_state_name s);

#endif

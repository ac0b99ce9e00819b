/* The per-backend state machine (monitor-backend-state.h). One function
 * per event; the transitions are listed in the header. */
#include "services/monitor/monitor-backend-state.h"

#include <string.h>

void monitor_state_init(struct monitor_backend_state *st, const struct monitor_thresholds *th,
                        bool flushed)
{
    memset(st, 0, sizeof(*st));
    st->th = *th;
    st->flushed = flushed;
}

static void reset_counts(struct monitor_backend_state *st)
{
    st->rapid = false;
    st->failures = 0;
    st->rapid_done = 0;
    st->rapid_failed = 0;
}

static enum monitor_report flush(struct monitor_backend_state *st)
{
    st->last_rapid_failed = st->rapid_failed;
    reset_counts(st);
    if (st->flushed)
        return MONITOR_REPORT_NONE; /* the director flushed it meanwhile */
    st->flushed = true;
    st->flushed_by_us = true;
    return MONITOR_REPORT_FLUSH;
}

static enum monitor_report rapid_poll_done(struct monitor_backend_state *st, bool success)
{
    st->rapid_done++;
    if (!success)
        st->rapid_failed++;
    if (st->rapid_done < st->th.rapid_rounds)
        return MONITOR_REPORT_NONE;
    if (st->rapid_failed >= st->th.rapid_fails_needed)
        return flush(st);
    st->last_rapid_failed = st->rapid_failed;
    reset_counts(st);
    return MONITOR_REPORT_NONE;
}

static enum monitor_report normal_poll_done(struct monitor_backend_state *st, bool success)
{
    if (success) {
        st->failures = 0;
        if (!st->flushed || (st->th.restore_own_only && !st->flushed_by_us))
            return MONITOR_REPORT_NONE;
        st->flushed = false;
        st->flushed_by_us = false;
        return MONITOR_REPORT_UP;
    }
    if (st->failures < INT64_MAX)
        st->failures++;
    if (st->flushed || st->failures < st->th.retry_count)
        return MONITOR_REPORT_NONE;
    if (st->th.rapid_rounds == 0)
        return flush(st);
    st->rapid = true;
    st->rapid_done = 0;
    st->rapid_failed = 0;
    return MONITOR_REPORT_NONE;
}

enum monitor_report monitor_state_poll_done(struct monitor_backend_state *st, bool success)
{
    return st->rapid ? rapid_poll_done(st, success) : normal_poll_done(st, success);
}

enum monitor_poll_kind monitor_state_next_poll(const struct monitor_backend_state *st)
{
    return st->rapid ? MONITOR_POLL_RAPID : MONITOR_POLL_NORMAL;
}

void monitor_state_director(struct monitor_backend_state *st, bool flushed)
{
    if (flushed == st->flushed)
        return; /* nothing new (or the echo of our own report) */
    st->flushed = flushed;
    st->flushed_by_us = false;
    reset_counts(st);
}

enum monitor_state_name monitor_state_get(const struct monitor_backend_state *st)
{
    if (st->flushed)
        return MONITOR_STATE_FLUSH;
    if (st->rapid)
        return MONITOR_STATE_RAPID;
    return st->failures > 0 ? MONITOR_STATE_FAILING : MONITOR_STATE_UP;
}

const char *monitor_state_label(enum monitor_state_name s)
{
    switch (s) {
    case MONITOR_STATE_UP:
        return "up";
    case MONITOR_STATE_FAILING:
        return "failing";
    case MONITOR_STATE_RAPID:
        return "rapid";
    case MONITOR_STATE_FLUSH:
        return "flush";
    }
    return "up";
}

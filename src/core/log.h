/* Structured logging: one line per event on stderr,
 *   ts=<RFC 3339 UTC> level=<level> component=<name> msg="<event>" key=value ...
 * The level is process-wide with per-component overrides and can change at
 * run time (telemetry /debug/loglevel, SIGHUP). The level table lives in the
 * process's top-level context; log_install() points the logger at it. Until
 * then, and in tools, everything at info and above is printed. */
#ifndef PETREL_CORE_LOG_H
#define PETREL_CORE_LOG_H

#include <stdbool.h>
#include <stddef.h>

/* Numeric values follow Go's log/slog so dashboards read the same numbers. */
enum log_level {
    LOG_DEBUG = -4,
    LOG_INFO = 0,
    LOG_WARN = 4,
    LOG_ERROR = 8,
};

#define LOG_MAX_OVERRIDES 32

struct log_override {
    char component[48];
    enum log_level level;
};

struct log_levels {
    enum log_level base;
    size_t override_count;
    struct log_override overrides[LOG_MAX_OVERRIDES];
};

/* Parses "debug", "info", "warn"/"warning", "error" (case-insensitive). */
bool log_level_parse(const char *name, enum log_level *out);
const char *log_level_name(enum log_level level);

/* Makes `levels` the live table (not copied). Threads may be logging while
 * it is swapped: a reload installs a new table rather than rewriting the
 * live one, and a replaced table stays allocated until no other thread can
 * still be reading it (the daemon frees them all at exit). */
void log_install(struct log_levels *levels);
/* Current live table, or NULL when none is installed. */
struct log_levels *log_installed(void);
/* The live table's base level (LOG_INFO when none is installed), and a
 * change of it in place: one atomic store, so a thread logging meanwhile
 * sees the old level or the new one. No-op when no table is installed. */
enum log_level log_base_level(void);
void log_set_base_level(enum log_level level);
/* The level in force for `component` (its override, else the base). */
enum log_level log_level_for(const char *component);
bool log_enabled(enum log_level level, const char *component);

/* Writes one event. `kv_fmt` (may be NULL) is printf-formatted and appended
 * after msg; values with spaces must be passed through log_quote(). */
void log_event(enum log_level level, const char *component, const char *msg, const char *kv_fmt,
               ...) __attribute__((format(printf, 4, 5)));

/* Quotes `s` into `dst` when it contains spaces, quotes, '=' or control
 * characters; returns dst. Truncates to `size`. */
const char *log_quote(char *dst, size_t size, const char *s);

#define log_debug(comp, msg, ...) log_event(LOG_DEBUG, comp, msg, __VA_ARGS__)
#define log_info(comp, msg, ...) log_event(LOG_INFO, comp, msg, __VA_ARGS__)
#define log_warn(comp, msg, ...) log_event(LOG_WARN, comp, msg, __VA_ARGS__)
#define log_error(comp, msg, ...) log_event(LOG_ERROR, comp, msg, __VA_ARGS__)

#endif

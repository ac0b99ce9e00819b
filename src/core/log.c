#include "core/log.h"

#include "core/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* The one process-wide pointer: the table itself belongs to the context. */
static struct log_levels *live_levels;

/* A level's name first, then the other spellings parsing accepts: one
 * table serves both directions. */
static const struct {
    const char *name;
    enum log_level level;
} level_names[] = {
    {"debug", LOG_DEBUG}, {"info", LOG_INFO},    {"warn", LOG_WARN},
    {"error", LOG_ERROR}, {"warning", LOG_WARN},
};

bool log_level_parse(const char *name, enum log_level *out)
{
    for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
        if (strcasecmp(name, level_names[i].name) == 0) {
            *out = level_names[i].level;
            return true;
        }
    }
    return false;
}

const char *log_level_name(enum log_level level)
{
    for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
        if (level_names[i].level == level)
            return level_names[i].name;
    }
    return "info";
}

/* Session loops and delivery threads log while the main loop installs a
 * reloaded table: the pointer is published with release/acquire (a reader
 * sees a table whole), and the base level, which /debug/loglevel changes in
 * place, is read and written atomically. */
void log_install(struct log_levels *levels)
{
    __atomic_store_n(&live_levels, levels, __ATOMIC_RELEASE);
}

struct log_levels *log_installed(void)
{
    return __atomic_load_n(&live_levels, __ATOMIC_ACQUIRE);
}

enum log_level log_base_level(void)
{
    struct log_levels *levels = log_installed();
    return levels == NULL ? LOG_INFO : __atomic_load_n(&levels->base, __ATOMIC_RELAXED);
}

void log_set_base_level(enum log_level level)
{
    struct log_levels *levels = log_installed();
    if (levels != NULL)
        __atomic_store_n(&levels->base, level, __ATOMIC_RELAXED);
}

enum log_level log_level_for(const char *component)
{
    struct log_levels *levels = log_installed();
    if (levels == NULL)
        return LOG_INFO;
    if (component != NULL) {
        for (size_t i = 0; i < levels->override_count; i++) {
            if (strcmp(levels->overrides[i].component, component) == 0)
                return levels->overrides[i].level;
        }
    }
    return __atomic_load_n(&levels->base, __ATOMIC_RELAXED);
}

bool log_enabled(enum log_level level, const char *component)
{
    return level >= log_level_for(component);
}

static bool needs_quoting(const char *s)
{
    if (*s == '\0')
        return true;
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c == 0x7f)
            return true;
    }
    return false;
}

const char *log_quote(char *dst, size_t size, const char *s)
{
    if (size == 0)
        return dst;
    if (!needs_quoting(s)) {
        snprintf(dst, size, "%s", s);
        return dst;
    }
    if (size < 3) { /* no room for even "" */
        dst[0] = '\0';
        return dst;
    }
    size_t o = 0;
    dst[o++] = '"';
    for (; *s != '\0' && o + 5 < size; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            dst[o++] = '\\';
            dst[o++] = (char)c;
        } else if (c == '\n') {
            dst[o++] = '\\';
            dst[o++] = 'n';
        } else if (c < ' ' || c == 0x7f) {
            o += (size_t)snprintf(dst + o, size - o, "\\x%02x", c);
        } else {
            dst[o++] = (char)c;
        }
    }
    dst[o++] = '"';
    dst[o < size ? o : size - 1] = '\0';
    return dst;
}

void log_event(enum log_level level, const char *component, const char *msg, const char *kv_fmt,
               ...)
{
    if (!log_enabled(level, component))
        return;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char ts[40];
    size_t n = strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + n, sizeof(ts) - n, ".%03ldZ", (long)(tv.tv_usec / 1000));

    char quoted[512];
    struct buf line = {0};
    buf_printf(&line, "ts=%s level=%s component=%s msg=%s", ts, log_level_name(level),
               component != NULL ? component : "petrel", log_quote(quoted, sizeof(quoted), msg));
    if (kv_fmt != NULL && *kv_fmt != '\0') {
        buf_append_char(&line, ' ');
        va_list ap;
        va_start(ap, kv_fmt);
        buf_vprintf(&line, kv_fmt, ap);
        va_end(ap);
    }
    buf_append_char(&line, '\n');
    /* One write per line keeps lines whole when processes share stderr. */
    ssize_t off = 0;
    while ((size_t)off < line.len) {
        ssize_t w = write(STDERR_FILENO, line.data + off, line.len - (size_t)off);
        if (w <= 0)
            break;
        off += w;
    }
    buf_free(&line);
}

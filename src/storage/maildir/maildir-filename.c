/* Maildir message file names (see maildir-filename.h).
 *
 * Compatibility notes (Dovecot 2.3, src/lib-storage/index/maildir/):
 * - The base name is everything before the first ':'; Dovecot's uidlist and
 *   its base-name comparison stop there too.
 * - Flags come from the part after the last ':' when it starts with "2,".
 *   Letters up to a ',' are the flag set; a ',' starts Dovecot's
 *   "non-standard fields", kept verbatim after the flags.
 * - When flags are rewritten the known letters are merged into the unknown
 *   ones in ASCII order and keyword letters follow the upper-case ones, as
 *   Dovecot's maildir_filename_flags_set() does. Dovecot does not know 'P'
 *   (passed) and keeps it as an unknown letter, which sorts the same way.
 * - ",S=<n>" and ",W=<n>" are looked up at their first occurrence in the
 *   base; the digits must end at ',' or at the end of the base. */
#include "storage/maildir/maildir-filename.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

/* The standard letters in ASCII order with their flag bits. */
static const struct {
    char letter;
    uint32_t flag;
} std_flags[] = {
    {'D', MAIL_FLAG_DRAFT},    {'F', MAIL_FLAG_FLAGGED}, {'P', MAIL_FLAG_PASSED},
    {'R', MAIL_FLAG_ANSWERED}, {'S', MAIL_FLAG_SEEN},    {'T', MAIL_FLAG_DELETED},
};

#define STD_FLAG_COUNT (sizeof(std_flags) / sizeof(std_flags[0]))

static uint32_t std_flag_of(char c)
{
    for (size_t i = 0; i < STD_FLAG_COUNT; i++) {
        if (std_flags[i].letter == c)
            return std_flags[i].flag;
    }
    return 0;
}

/* Finds ",<type>=<digits>" (first occurrence) in base[0..len). */
static bool find_size(const char *base, size_t len, char type, uint64_t *out)
{
    for (size_t i = 0; i + 3 <= len; i++) {
        if (base[i] != ',' || base[i + 1] != type || base[i + 2] != '=')
            continue;
        size_t p = i + 3;
        uint64_t v = 0;
        size_t digits = 0;
        while (p < len && base[p] >= '0' && base[p] <= '9') {
            unsigned d = (unsigned)(base[p] - '0');
            if (v > (UINT64_MAX - d) / 10)
                return false;
            v = v * 10 + d;
            p++;
            digits++;
        }
        if (digits == 0 || (p < len && base[p] != ','))
            return false;
        *out = v;
        return true;
    }
    return false;
}

bool maildir_filename_parse(const char *name, struct maildir_filename *out)
{
    memset(out, 0, sizeof(*out));
    if (name == NULL || name[0] == '\0' || name[0] == '.' || strchr(name, '/') != NULL)
        return false;
    const char *colon = strchr(name, ':');
    size_t base_len = colon != NULL ? (size_t)(colon - name) : strlen(name);
    if (base_len == 0)
        return false;
    out->base = name;
    out->base_len = base_len;
    out->has_size = find_size(name, base_len, 'S', &out->size);
    out->has_vsize = find_size(name, base_len, 'W', &out->vsize);

    const char *info = strrchr(name, ':');
    if (info == NULL || info[1] != '2' || info[2] != ',')
        return true;
    out->has_info = true;
    size_t nunknown = 0;
    const size_t room = sizeof(out->unknown_flags) - 1;
    const char *p = info + 3;
    for (; *p != '\0' && *p != ','; p++) {
        uint32_t f = std_flag_of(*p);
        if (f != 0)
            out->flags |= f;
        else if (*p >= 'a' && *p <= 'z')
            out->keywords |= 1u << (*p - 'a');
        else if (nunknown < room)
            out->unknown_flags[nunknown++] = *p;
    }
    /* Dovecot's extra fields after ',' are kept verbatim (as much as fits). */
    for (; *p != '\0' && nunknown < room; p++)
        out->unknown_flags[nunknown++] = *p;
    out->unknown_flags[nunknown] = '\0';
    return true;
}

/* Appends the known letters below `limit` (unsigned compare) not yet written. */
static void emit_known_below(unsigned limit, uint32_t flags, uint32_t keywords, uint32_t *done_std,
                             uint32_t *done_kw, struct buf *out)
{
    for (size_t i = 0; i < STD_FLAG_COUNT; i++) {
        if ((unsigned char)std_flags[i].letter >= limit)
            break;
        if ((flags & std_flags[i].flag) != 0 && (*done_std & std_flags[i].flag) == 0) {
            buf_append_char(out, std_flags[i].letter);
            *done_std |= std_flags[i].flag;
        }
    }
    for (unsigned k = 0; k < MAILDIR_MAX_KEYWORDS; k++) {
        if ((unsigned)('a' + k) >= limit)
            break;
        uint32_t bit = 1u << k;
        if ((keywords & bit) != 0 && (*done_kw & bit) == 0) {
            buf_append_char(out, (char)('a' + k));
            *done_kw |= bit;
        }
    }
}

void maildir_filename_build(const char *base, size_t base_len, uint32_t flags, uint32_t keywords,
                            const char *unknown_flags, struct buf *out)
{
    flags &= MAIL_FLAG_ALL;
    keywords &= (1u << MAILDIR_MAX_KEYWORDS) - 1;
    buf_append(out, base, base_len);
    buf_append(out, ":2,", 3);
    uint32_t done_std = 0, done_kw = 0;
    const char *p = unknown_flags != NULL ? unknown_flags : "";
    for (; *p != '\0' && *p != ','; p++) {
        /* Known letters in the unknown list would duplicate: skip them. */
        if (std_flag_of(*p) != 0 || (*p >= 'a' && *p <= 'z'))
            continue;
        emit_known_below((unsigned char)*p, flags, keywords, &done_std, &done_kw, out);
        buf_append_char(out, *p);
    }
    emit_known_below(256, flags, keywords, &done_std, &done_kw, out);
    buf_append_str(out, p); /* "" or the ",..." extra fields */
}

void maildir_name_source_init(struct maildir_name_source *src)
{
    char host[256];
    if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0')
        strcpy(host, "localhost");
    host[sizeof(host) - 1] = '\0';
    size_t at = 0;
    for (const char *h = host; *h != '\0'; h++) {
        if (*h == '/' || *h == ':') {
            memcpy(src->host + at, *h == '/' ? "\\057" : "\\072", 4);
            at += 4;
        } else {
            src->host[at++] = *h;
        }
    }
    src->host[at] = '\0';
    src->pid = (long)getpid();
    atomic_init(&src->counter, 0);
}

uint64_t maildir_name_source_next(struct maildir_name_source *src)
{
    return atomic_fetch_add(&src->counter, 1) + 1;
}

void maildir_filename_new_base(struct maildir_name_source *src, uint64_t size, uint64_t vsize,
                               struct buf *out)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    buf_printf(out, "%lld.M%ldP%ldQ%llu.%s,S=%llu,W=%llu", (long long)tv.tv_sec, (long)tv.tv_usec,
               src->pid, (unsigned long long)maildir_name_source_next(src), src->host,
               (unsigned long long)size, (unsigned long long)vsize);
}

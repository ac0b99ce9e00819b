/* fileindex helpers: clocks and random lineages, whole-buffer I/O,
 * the fsync policy, atomic file replacement, and the in-memory view (packed
 * record array, name arena, mappings). */
#include "storage/fileindex/fileindex-private.h"

#include "core/bsearch-insert.h"
#include "core/error.h"
#include "core/fs-util.h"
#include "core/xalloc.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef MAP_POPULATE
#define MAP_POPULATE 0
#endif

/* ---------- clocks, random ---------- */

double fi_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t fi_random64(void)
{
    static uint64_t fallback_state;
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        fallback_state ^=
            (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ ((uint64_t)getpid() << 40);
        v = splitmix(&fallback_state);
    }
    return v != 0 ? v : 1;
}

/* ---------- I/O ---------- */

ssize_t fi_pread_all(int fd, void *data, size_t len, uint64_t off)
{
    char *p = data;
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(fd, p + done, len - done, (off_t)(off + done));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (n == 0)
            break;
        done += (size_t)n;
    }
    return (ssize_t)done;
}

void fi_file_id_from_stat(struct fi_file_id *id, const struct stat *st)
{
    id->dev = st->st_dev;
    id->ino = st->st_ino;
    id->size = st->st_size;
    id->mtime_sec = (int64_t)st->st_mtim.tv_sec;
    id->mtime_nsec = st->st_mtim.tv_nsec;
}

bool fi_file_id_equal(const struct fi_file_id *a, const struct fi_file_id *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime_sec == b->mtime_sec && a->mtime_nsec == b->mtime_nsec;
}

bool fi_io_error(struct petrel_error *err, const char *what, const char *path)
{
    return petrel_error_set_errno(err, errno, "%s %s: %s", what, path, strerror(errno));
}

bool fi_sync(const struct fileindex *fi, int fd, bool important)
{
    switch (fi->set.fsync) {
    case FILEINDEX_FSYNC_NEVER:
        return true;
    case FILEINDEX_FSYNC_OPTIMIZED:
        if (!important)
            return true;
        return fdatasync(fd) == 0;
    case FILEINDEX_FSYNC_ALWAYS:
    default:
        return fsync(fd) == 0;
    }
}

bool fi_sync_dir(const struct fileindex *fi)
{
    if (fi->set.fsync == FILEINDEX_FSYNC_NEVER)
        return true;
    return fsync(fi->dir_fd) == 0 || errno == EINVAL;
}

const char *fi_name(const struct fileindex *fi, const char *path)
{
    return fs_path_under(fi->dir, path);
}

int fi_tmp_create(const struct fileindex *fi, const char *path, char **tmp_out,
                  struct petrel_error *err)
{
    char *tmp = xasprintf("%s.tmp", path);
    int fd = openat(fi->dir_fd, fi_name(fi, tmp), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        fi_io_error(err, "cannot create", tmp);
        free(tmp);
        return -1;
    }
    *tmp_out = tmp;
    return fd;
}

bool fi_tmp_install(struct fileindex *fi, int fd, char *tmp, const char *path,
                    struct petrel_error *err)
{
    bool ok = true;
    if (!fi_sync(fi, fd, true))
        ok = fi_io_error(err, "cannot fsync", tmp);
    if (ok && renameat(fi->dir_fd, fi_name(fi, tmp), fi->dir_fd, fi_name(fi, path)) != 0)
        ok = fi_io_error(err, "cannot rename to", path);
    if (!ok) {
        unlinkat(fi->dir_fd, fi_name(fi, tmp), 0);
        close(fd);
    } else if (!fi_sync_dir(fi)) {
        /* The rename happened; a failed directory fsync only weakens
         * durability across a power loss, so report but keep going. */
        fi_io_error(err, "cannot fsync directory", fi->dir);
    }
    free(tmp);
    return ok;
}

bool fi_replace_file(struct fileindex *fi, const char *path, const void *data, size_t len,
                     int *fd_out, struct petrel_error *err)
{
    char *tmp = NULL;
    int fd = fi_tmp_create(fi, path, &tmp, err);
    if (fd < 0)
        return false;
    if (!fs_pwrite_all(fd, data, len, 0)) {
        fi_io_error(err, "cannot write", tmp);
        close(fd);
        unlinkat(fi->dir_fd, fi_name(fi, tmp), 0);
        free(tmp);
        return false;
    }
    if (!fi_tmp_install(fi, fd, tmp, path, err))
        return false;
    if (fd_out != NULL)
        *fd_out = fd;
    else
        close(fd);
    return true;
}

/* ---------- arena ---------- */

#define FI_CHUNK_SIZE 65536u

struct fi_chunk {
    struct fi_chunk *next;
    size_t used;
    size_t cap;
    char data[];
};

const char *fi_arena_dup(struct fi_arena *a, const char *s, size_t len)
{
    struct fi_chunk *c = a->head;
    if (c == NULL || c->cap - c->used < len + 1) {
        size_t cap = len + 1 > FI_CHUNK_SIZE ? len + 1 : FI_CHUNK_SIZE;
        c = xmalloc(sizeof(*c) + cap);
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
        a->bytes += sizeof(*c) + cap;
    }
    char *p = c->data + c->used;
    memcpy(p, s, len);
    p[len] = '\0';
    c->used += len + 1;
    return p;
}

void fi_arena_free(struct fi_arena *a)
{
    struct fi_chunk *c = a->head;
    while (c != NULL) {
        struct fi_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->bytes = 0;
}

/* ---------- view ---------- */

/* Record arrays of this size and more live in their own anonymous mapping,
 * so growing them (appends arriving through the log) is an mremap, not a
 * copy of the whole array. */
#define FI_RECS_MAP_MIN (256u * 1024u)

static size_t recs_bytes(size_t cap)
{
    if (cap > SIZE_MAX / sizeof(struct fileindex_record))
        petrel_fatal("record array size overflow");
    return cap * sizeof(struct fileindex_record);
}

static void recs_release(struct fi_view *v)
{
    if (v->recs_mapped)
        munmap(v->recs, recs_bytes(v->cap));
    else
        free(v->recs);
    v->recs = NULL;
    v->recs_mapped = false;
}

void fi_view_alloc(struct fi_view *v, size_t cap)
{
    PETREL_ASSERT(v->recs == NULL);
    size_t bytes = recs_bytes(cap);
    v->cap = cap;
    if (bytes >= FI_RECS_MAP_MIN) {
        /* Prefaulted in one go: the caller fills it right away. */
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (p == MAP_FAILED)
            petrel_fatal("out of memory (%zu bytes)", bytes);
        v->recs = p;
        v->recs_mapped = true;
    } else {
        v->recs = xmalloc(bytes > 0 ? bytes : 1);
    }
}

void fi_view_free(struct fi_view *v)
{
    recs_release(v);
    fi_arena_free(&v->names);
    struct fi_map *m = v->maps;
    while (m != NULL) {
        struct fi_map *next = m->next;
        munmap(m->addr, m->len);
        free(m);
        m = next;
    }
    memset(v, 0, sizeof(*v));
}

void fi_view_reserve(struct fi_view *v, size_t extra)
{
    if (v->count + extra <= v->cap)
        return;
    size_t cap = v->cap + v->cap / 16 + 256;
    if (cap < v->count + extra)
        cap = v->count + extra;
    size_t bytes = recs_bytes(cap);
    if (v->recs_mapped) {
        void *p = mremap(v->recs, recs_bytes(v->cap), bytes, MREMAP_MAYMOVE);
        if (p == MAP_FAILED)
            petrel_fatal("out of memory (%zu bytes)", bytes);
        v->recs = p;
    } else if (bytes >= FI_RECS_MAP_MIN) {
        struct fileindex_record *old = v->recs;
        v->recs = NULL;
        fi_view_alloc(v, cap);
        if (v->count > 0)
            memcpy(v->recs, old, v->count * sizeof(*old));
        free(old);
    } else {
        v->recs = xrealloc(v->recs, bytes);
    }
    v->cap = cap;
}

size_t fi_view_search(const struct fi_view *v, uint32_t uid, bool *found)
{
    size_t lo = bsearch_u32_lower(v->recs, v->count, sizeof(*v->recs),
                                  offsetof(struct fileindex_record, uid), uid);
    *found = lo < v->count && v->recs[lo].uid == uid;
    return lo;
}

void fi_view_compact(struct fi_view *v)
{
    if (v->expunged_marks == 0)
        return;
    size_t w = 0;
    for (size_t i = 0; i < v->count; i++) {
        if (v->recs[i].filename == NULL)
            continue;
        if (w != i)
            v->recs[w] = v->recs[i];
        w++;
    }
    v->count = w;
    v->expunged_marks = 0;
}

void fi_view_add_map(struct fi_view *v, void *addr, size_t len)
{
    struct fi_map *m = xmalloc(sizeof(*m));
    m->addr = addr;
    m->len = len;
    m->next = v->maps;
    v->maps = m;
}

void fi_state_init(struct fi_state *s)
{
    memset(s, 0, sizeof(*s));
    s->base_fd = -1;
    s->log_fd = -1;
}

void fi_state_free(struct fi_state *s)
{
    fi_view_free(&s->view);
    if (s->base_fd >= 0)
        close(s->base_fd);
    if (s->log_fd >= 0)
        close(s->log_fd);
    fi_state_init(s);
}

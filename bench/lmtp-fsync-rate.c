/* The machine's fsync rate, for bench/lmtp.sh (docs/performance.md, "LMTP").
 *
 *   lmtp-fsync-rate DIR [seconds] [threads]
 *
 * Runs for `seconds` (default 3) with `threads` (default 1) threads, each on
 * its own file in DIR, and prints one line per pattern:
 *
 *   fio-style  4 KiB written in place into a file laid out beforehand, then
 *              fsync (what `fio --rw=write --bs=4k --fsync=1` measures: the
 *              cost of one cache flush plus a 4 KiB write, no metadata)
 *   append     4 KiB appended, then fdatasync (a log: the size changes, so
 *              every sync is a journal commit)
 *   new-file   create, write 4 KiB, fsync, close, unlink (a naive maildir
 *              delivery's file part, without the directory)
 *
 * Output: "fsync-rate: pattern=<p> threads=<n> ops=<n> seconds=<s> rate=<ops/s>".
 * The first pattern's single-thread rate is what the LMTP targets compare to.
 * Files are removed afterwards. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BLOCK 4096
#define LAYOUT_BYTES (16u * 1024 * 1024)

enum pattern { FIO_STYLE, APPEND, NEW_FILE };
static const char *const pattern_names[] = {"fio-style", "append", "new-file"};

struct worker {
    pthread_t thread;
    const char *dir;
    unsigned index;
    enum pattern pattern;
    double seconds;
    unsigned long ops;
    int failed;
};

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int write_full(int fd, const char *buf, size_t len, off_t off)
{
    while (len > 0) {
        ssize_t w = off >= 0 ? pwrite(fd, buf, len, off) : write(fd, buf, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        buf += w;
        len -= (size_t)w;
        if (off >= 0)
            off += w;
    }
    return 0;
}

static void *run(void *arg)
{
    struct worker *w = arg;
    char block[BLOCK];
    memset(block, 'x', sizeof(block));
    char path[4096];
    snprintf(path, sizeof(path), "%s/fsync-rate.%u", w->dir, w->index);
    int fd = -1;
    if (w->pattern != NEW_FILE) {
        fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0) {
            w->failed = errno;
            return NULL;
        }
        if (w->pattern == FIO_STYLE) {
            for (off_t off = 0; off < (off_t)LAYOUT_BYTES; off += BLOCK) {
                if (write_full(fd, block, BLOCK, off) != 0) {
                    w->failed = errno;
                    break;
                }
            }
            if (fsync(fd) != 0)
                w->failed = errno;
        }
    }
    double end = now() + w->seconds;
    off_t off = 0;
    while (!w->failed && now() < end) {
        if (w->pattern == FIO_STYLE) {
            if (write_full(fd, block, BLOCK, off) != 0 || fsync(fd) != 0)
                w->failed = errno;
            off = (off + BLOCK) % LAYOUT_BYTES;
        } else if (w->pattern == APPEND) {
            if (write_full(fd, block, BLOCK, -1) != 0 || fdatasync(fd) != 0)
                w->failed = errno;
        } else {
            int nfd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
            if (nfd < 0 || write_full(nfd, block, BLOCK, -1) != 0 || fsync(nfd) != 0)
                w->failed = errno;
            if (nfd >= 0)
                close(nfd);
            unlink(path);
        }
        w->ops++;
    }
    if (fd >= 0) {
        close(fd);
        unlink(path);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: lmtp-fsync-rate DIR [seconds] [threads]\n");
        return 2;
    }
    double seconds = argc > 2 ? atof(argv[2]) : 3.0;
    unsigned threads = argc > 3 ? (unsigned)atoi(argv[3]) : 1;
    if (seconds <= 0 || threads == 0 || threads > 64) {
        fprintf(stderr, "lmtp-fsync-rate: bad seconds or threads (1..64)\n");
        return 2;
    }
    int rc = 0;
    for (enum pattern p = FIO_STYLE; p <= NEW_FILE; p++) {
        struct worker *ws = calloc(threads, sizeof(*ws));
        for (unsigned i = 0; i < threads; i++) {
            ws[i] = (struct worker){.dir = argv[1], .index = i, .pattern = p, .seconds = seconds};
            pthread_create(&ws[i].thread, NULL, run, &ws[i]);
        }
        unsigned long ops = 0;
        for (unsigned i = 0; i < threads; i++) {
            pthread_join(ws[i].thread, NULL);
            ops += ws[i].ops;
            if (ws[i].failed) {
                fprintf(stderr, "lmtp-fsync-rate: %s: %s\n", pattern_names[p],
                        strerror(ws[i].failed));
                rc = 1;
            }
        }
        /* Each thread measured `seconds` after its own setup (the layout). */
        double secs = seconds;
        printf("fsync-rate: pattern=%s threads=%u ops=%lu seconds=%.2f rate=%.0f\n",
               pattern_names[p], threads, ops, secs, (double)ops / secs);
        fflush(stdout);
        free(ws);
    }
    return rc;
}

/* mail-storage.h over Maildir++: change notification for one folder
 * (mailbox_watch_*, what IMAP IDLE waits on).
 *
 * What a change by any process touches:
 *   new/        a delivery by another program (a file created or moved in)
 *   cur/        an append, a flag rename, an expunge
 *   the folder  petrel.index.log (every index commit appends to it),
 *               petrel.index (a fold replaces it), dovecot-uidlist and
 *               dovecot-keywords (replaced by rename)
 * With inotify those three directories are watched; other files in the
 * folder (the index cache, the lock, the sync stamp) change on reads too
 * and are ignored, or a session caching its own FETCH data would wake
 * itself. Events come in bursts (one append is a rename, a log write and a
 * uidlist rename), so the first relevant event arms a short timer and the
 * callback runs once when it fires. Without inotify (or when a watch
 * cannot be added, e.g. the instance limit is reached) a timer compares
 * the times and sizes of the same things every MAILBOX_WATCH_POLL_MS. */
#include "storage/maildir/maildir-private.h"

#include "core/log.h"
#include "core/xalloc.h"

#include <errno.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define COMPONENT "storage"

bool maildir_watch_force_poll = false;

/* Files in the folder directory whose change means the folder changed. */
static const char *const watched_files[] = {"petrel.index", "petrel.index.log", MAILDIR_UIDLIST,
                                            MAILDIR_KEYWORDS};
#define WATCHED_FILE_COUNT (sizeof(watched_files) / sizeof(watched_files[0]))

#define MSG_DIR_EVENTS (IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE)
#define FOLDER_EVENTS                                                                              \
    (IN_MODIFY | IN_CLOSE_WRITE | IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_DELETE_SELF |           \
     IN_MOVE_SELF)

/* What polling compares: the stat fields a change moves. */
struct poll_sig {
    struct timespec mtime[2 + WATCHED_FILE_COUNT];
    off_t size[2 + WATCHED_FILE_COUNT];
    ino_t ino[2 + WATCHED_FILE_COUNT];
};

struct mailbox_watch {
    char *dir;
    void (*fn)(void *ctx);
    void *ctx;
    int inotify_fd; /* -1 when polling */
    int folder_wd;
    struct event *io;    /* inotify readable */
    struct event *timer; /* coalescing (inotify) or the poll interval */
    bool armed;          /* coalescing timer pending */
    struct poll_sig sig;
};

static void take_sig(const struct mailbox_watch *w, struct poll_sig *sig)
{
    memset(sig, 0, sizeof(*sig));
    struct buf path = {0};
    for (size_t i = 0; i < 2 + WATCHED_FILE_COUNT; i++) {
        buf_reset(&path);
        buf_printf(&path, "%s/%s", w->dir, i == 0 ? "new" : i == 1 ? "cur" : watched_files[i - 2]);
        struct stat st;
        if (stat(path.data, &st) == 0) {
            sig->mtime[i] = st.st_mtim;
            sig->size[i] = st.st_size;
            sig->ino[i] = st.st_ino;
        }
    }
    buf_free(&path);
}

static bool sig_equal(const struct poll_sig *a, const struct poll_sig *b)
{
    for (size_t i = 0; i < 2 + WATCHED_FILE_COUNT; i++) {
        if (a->mtime[i].tv_sec != b->mtime[i].tv_sec ||
            a->mtime[i].tv_nsec != b->mtime[i].tv_nsec || a->size[i] != b->size[i] ||
            a->ino[i] != b->ino[i])
            return false;
    }
    return true;
}

static void on_poll(evutil_socket_t fd, short what, void *arg)
{
    struct mailbox_watch *w = arg;
    struct poll_sig now;
    take_sig(w, &now);
    if (sig_equal(&now, &w->sig))
        return;
    w->sig = now;
    w->fn(w->ctx); /* last: the callback may free the watch */
}

static void on_coalesced(evutil_socket_t fd, short what, void *arg)
{
    struct mailbox_watch *w = arg;
    w->armed = false;
    w->fn(w->ctx); /* last: the callback may free the watch */
}

static bool relevant(const struct mailbox_watch *w, const struct inotify_event *ev)
{
    if (ev->wd != w->folder_wd)
        return true; /* new/ or cur/ */
    if ((ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) != 0)
        return true; /* the folder itself went: the server's sync finds out */
    if (ev->len == 0)
        return false;
    for (size_t i = 0; i < WATCHED_FILE_COUNT; i++) {
        if (strcmp(ev->name, watched_files[i]) == 0)
            return true;
    }
    return false;
}

static void on_inotify(evutil_socket_t fd, short what, void *arg)
{
    struct mailbox_watch *w = arg;
    bool changed = false;
    char events[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    for (;;) {
        ssize_t r = read(w->inotify_fd, events, sizeof(events));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break; /* EAGAIN: drained */
        for (char *p = events; p < events + r;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;
            changed = changed || (ev->mask & IN_Q_OVERFLOW) != 0 || relevant(w, ev);
            p += sizeof(*ev) + ev->len;
        }
    }
    if (changed && !w->armed) {
        struct timeval tv = {0, MAILBOX_WATCH_COALESCE_MS * 1000};
        evtimer_add(w->timer, &tv);
        w->armed = true;
    }
}

/* inotify on new/, cur/ and the folder; false (polling instead) when any
 * part is unavailable. */
static bool start_inotify(struct mailbox_watch *w, struct event_base *base)
{
    if (maildir_watch_force_poll)
        return false;
    w->inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (w->inotify_fd < 0)
        return false;
    struct buf path = {0};
    bool ok = true;
    static const char *const subs[] = {"new", "cur"};
    for (size_t i = 0; ok && i < 2; i++) {
        buf_reset(&path);
        buf_printf(&path, "%s/%s", w->dir, subs[i]);
        ok = inotify_add_watch(w->inotify_fd, path.data, MSG_DIR_EVENTS) >= 0;
    }
    if (ok) {
        w->folder_wd = inotify_add_watch(w->inotify_fd, w->dir, FOLDER_EVENTS);
        ok = w->folder_wd >= 0;
    }
    if (!ok)
        log_warn(COMPONENT, "inotify watch unavailable, polling", "folder=%s error=\"%s\"", w->dir,
                 strerror(errno));
    buf_free(&path);
    if (ok) {
        w->io = event_new(base, w->inotify_fd, EV_READ | EV_PERSIST, on_inotify, w);
        w->timer = evtimer_new(base, on_coalesced, w);
        ok = w->io != NULL && w->timer != NULL && event_add(w->io, NULL) == 0;
    }
    if (!ok) {
        if (w->io != NULL)
            event_free(w->io);
        if (w->timer != NULL)
            event_free(w->timer);
        w->io = w->timer = NULL;
        close(w->inotify_fd);
        w->inotify_fd = -1;
    }
    return ok;
}

struct mailbox_watch *mailbox_watch_new(struct event_base *base, struct mailbox *box,
                                        void (*fn)(void *ctx), void *ctx, struct petrel_error *err)
{
    struct mailbox_watch *w = xcalloc(1, sizeof(*w));
    w->dir = xstrdup(box->dir);
    w->fn = fn;
    w->ctx = ctx;
    w->inotify_fd = -1;
    if (start_inotify(w, base))
        return w;
    take_sig(w, &w->sig);
    w->timer = event_new(base, -1, EV_PERSIST, on_poll, w);
    struct timeval tv = {MAILBOX_WATCH_POLL_MS / 1000, (MAILBOX_WATCH_POLL_MS % 1000) * 1000};
    if (w->timer == NULL || event_add(w->timer, &tv) != 0) {
        mailbox_watch_free(w);
        petrel_error_set(err, PETREL_ERR_IO, "cannot start the folder poll timer");
        return NULL;
    }
    return w;
}

bool mailbox_watch_is_native(const struct mailbox_watch *watch)
{
    return watch->inotify_fd >= 0;
}

void mailbox_watch_free(struct mailbox_watch *watch)
{
    if (watch == NULL)
        return;
    if (watch->io != NULL)
        event_free(watch->io);
    if (watch->timer != NULL)
        event_free(watch->timer);
    if (watch->inotify_fd >= 0)
        close(watch->inotify_fd);
    free(watch->dir);
    free(watch);
}

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
 * the times and sizes of the same things every MAILBOX_WATCH_POLL_MS.
 *
 * Every watch of a hub shares the hub's one inotify instance (the kernel's
 * default limit is 128 instances per user, and closing an instance stalls
 * the caller for milliseconds); directories watched by several watches
 * (sessions on one folder) share one inotify watch descriptor, counted. */
#include "storage/maildir/maildir-private.h"

#include "core/log.h"
#include "core/xalloc.h"

#include <errno.h>
#include <limits.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define COMPONENT "storage"

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

/* One watched directory of the hub's inotify instance. */
struct hub_target {
    int wd;      /* -1 once the kernel dropped it (IN_IGNORED) */
    bool folder; /* the folder directory (else new/ or cur/) */
    unsigned refs;
};

struct maildir_watch_hub {
    struct event_base *base;
    int fd; /* -1: every watch polls */
    struct event *io;
    struct hub_target *targets;
    size_t target_count;
    size_t target_cap;
    struct mailbox_watch **watches;
    size_t watch_count;
    size_t watch_cap;
};

#define WATCH_TARGETS 3 /* new/, cur/, the folder */

/* An event the watch's own session causes in cur/ (a flag rename, the
 * link of an append, the unlink of an expunge). */
struct own_event {
    uint32_t mask; /* IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE or IN_DELETE */
    char *name;
};

#define OWN_EVENTS_MAX 64 /* more renames before the next question: just report */

struct mailbox_watch {
    struct mailbox_watch_common c; /* first (mail-storage-private.h) */
    struct maildir_watch_hub *hub;
    char *dir;
    /* The handle the watching session changes the folder through (NULL
     * once closed), and what it expects to hear of its own changes. */
    struct mailbox *box;
    struct own_event *own;
    size_t own_count;
    bool own_log;          /* index log growth may be its own */
    bool own_uidlist;      /* an append to dovecot-uidlist is its own */
    bool log_check;        /* the log grew: compare it with the handle */
    bool distrust;         /* an own change failed half way */
    bool mark_valid;       /* foreign_mark holds */
    uint64_t foreign_mark; /* fileindex_foreign_changes() at the last view sync */
    void (*fn)(void *ctx);
    void *ctx;
    bool native;
    int wds[WATCH_TARGETS]; /* new/, cur/, folder; -1 when not held */
    struct event *timer;    /* coalescing (inotify) or the poll interval */
    bool armed;             /* coalescing timer pending */
    bool changed;           /* an event since mailbox_watch_take_changed() */
    bool lost;              /* a watched directory went: every question says "changed" */
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

static struct hub_target *find_target(struct maildir_watch_hub *hub, int wd)
{
    for (size_t i = 0; i < hub->target_count; i++) {
        if (hub->targets[i].wd == wd)
            return &hub->targets[i];
    }
    return NULL;
}

/* Whether an event on a folder directory is about a file that matters. */
static bool relevant(bool folder, const struct inotify_event *ev)
{
    if (!folder)
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

static void own_clear(struct mailbox_watch *w)
{
    for (size_t i = 0; i < w->own_count; i++)
        free(w->own[i].name);
    w->own_count = 0;
    w->own_log = false;
    w->own_uidlist = false;
}

/* Whether `ev` on target `k` (0 new/, 1 cur/, 2 the folder) is one the
 * watch's own session caused and expects; consumes the expectation. */
static bool own_event(struct mailbox_watch *w, size_t k, const struct inotify_event *ev)
{
    if (w->box == NULL || ev->len == 0)
        return false;
    if (k == 1 && (ev->mask == IN_MOVED_FROM || ev->mask == IN_MOVED_TO || ev->mask == IN_CREATE ||
                   ev->mask == IN_DELETE)) {
        for (size_t i = 0; i < w->own_count; i++) {
            if (w->own[i].mask == ev->mask && strcmp(w->own[i].name, ev->name) == 0) {
                free(w->own[i].name);
                w->own[i] = w->own[--w->own_count];
                return true;
            }
        }
        return false;
    }
    if (k == 2 && w->own_log && ev->mask == IN_MODIFY &&
        strcmp(ev->name, "petrel.index.log") == 0) {
        w->log_check = true; /* settled at the question: grown past the handle? */
        return true;
    }
    /* Another writer's append to the uidlist comes with its own file in
     * cur/ and index log growth, which still report. */
    if (k == 2 && w->own_uidlist && ev->mask == IN_MODIFY && strcmp(ev->name, MAILDIR_UIDLIST) == 0)
        return true;
    return false;
}

static void arm(struct mailbox_watch *w)
{
    if (w->armed)
        return;
    struct timeval tv = {0, MAILBOX_WATCH_COALESCE_MS * 1000};
    evtimer_add(w->timer, &tv);
    w->armed = true;
}

/* Marks and arms the coalescing timer of every watch holding `wd` (all of
 * them on a queue overflow); `gone`: the kernel dropped `wd` with its
 * directory, so those watches hear nothing more. Callbacks run later, from
 * the timers, so a callback freeing watches never meets this loop. */
static void dispatch(struct maildir_watch_hub *hub, int wd, const struct inotify_event *ev,
                     bool all, bool gone)
{
    for (size_t i = 0; i < hub->watch_count; i++) {
        struct mailbox_watch *w = hub->watches[i];
        for (size_t k = 0; k < WATCH_TARGETS; k++) {
            if (all || w->wds[k] == wd) {
                if (!all && !gone && own_event(w, k, ev))
                    break;
                w->changed = true;
                w->lost = w->lost || gone;
                arm(w);
                break;
            }
        }
    }
}

/* Reads every queued event (non-blocking) and dispatches it. */
static void drain(struct maildir_watch_hub *hub)
{
    char events[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    for (;;) {
        ssize_t r = read(hub->fd, events, sizeof(events));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break; /* EAGAIN: drained */
        /* Room left for another whole event: the read took every event
         * queued when it ran, so no second read (for EAGAIN) is needed. */
        bool emptied = (size_t)r + sizeof(struct inotify_event) + NAME_MAX + 1 <= sizeof(events);
        for (char *p = events; p < events + r;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;
            p += sizeof(*ev) + ev->len;
            if (ev->mask & IN_Q_OVERFLOW) {
                dispatch(hub, -1, ev, true, false);
                continue;
            }
            struct hub_target *t = find_target(hub, ev->wd);
            if (t == NULL)
                continue;
            bool folder = t->folder;
            bool gone = (ev->mask & IN_IGNORED) != 0;
            if (gone)
                t->wd = -1; /* gone with its directory; never removed again */
            if (gone || relevant(folder, ev))
                dispatch(hub, ev->wd, ev, false, gone);
        }
        if (emptied)
            break;
    }
}

static void on_inotify(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    drain(arg);
}

/* A counted hold on the hub's watch of `path`; -1 when it cannot be added. */
static int hold_target(struct maildir_watch_hub *hub, const char *path, bool folder)
{
    int wd = inotify_add_watch(hub->fd, path, folder ? FOLDER_EVENTS : MSG_DIR_EVENTS);
    if (wd < 0)
        return -1;
    struct hub_target *t = find_target(hub, wd);
    if (t == NULL) {
        hub->targets =
            xgrow(hub->targets, &hub->target_cap, hub->target_count + 1, sizeof(*hub->targets));
        t = &hub->targets[hub->target_count++];
        t->wd = wd;
        t->folder = folder;
        t->refs = 0;
    }
    t->refs++;
    return wd;
}

static void release_target(struct maildir_watch_hub *hub, int wd)
{
    struct hub_target *t = wd >= 0 ? find_target(hub, wd) : NULL;
    if (t == NULL || --t->refs > 0)
        return;
    inotify_rm_watch(hub->fd, wd);
    *t = hub->targets[--hub->target_count];
}

/* inotify on new/, cur/ and the folder; false (polling instead) when any
 * part is unavailable. */
static bool start_inotify(struct mailbox_watch *w)
{
    struct maildir_watch_hub *hub = w->hub;
    if (hub->fd < 0)
        return false;
    struct buf path = {0};
    bool ok = true;
    static const char *const subs[] = {"new", "cur"};
    for (size_t i = 0; ok && i < 2; i++) {
        buf_reset(&path);
        buf_printf(&path, "%s/%s", w->dir, subs[i]);
        w->wds[i] = hold_target(hub, path.data, false);
        ok = w->wds[i] >= 0;
    }
    if (ok) {
        w->wds[2] = hold_target(hub, w->dir, true);
        ok = w->wds[2] >= 0;
    }
    if (!ok)
        log_warn(COMPONENT, "inotify watch unavailable, polling", "folder=%s error=\"%s\"", w->dir,
                 strerror(errno));
    buf_free(&path);
    if (ok) {
        w->timer = evtimer_new(hub->base, on_coalesced, w);
        ok = w->timer != NULL;
    }
    if (!ok) {
        for (size_t k = 0; k < WATCH_TARGETS; k++) {
            release_target(hub, w->wds[k]);
            w->wds[k] = -1;
        }
    }
    return ok;
}

void *maildir_watch_hub_new(struct event_base *base, bool native)
{
    struct maildir_watch_hub *hub = xcalloc(1, sizeof(*hub));
    hub->base = base;
    hub->fd = native ? inotify_init1(IN_NONBLOCK | IN_CLOEXEC) : -1;
    if (hub->fd >= 0) {
        hub->io = event_new(base, hub->fd, EV_READ | EV_PERSIST, on_inotify, hub);
        if (hub->io == NULL || event_add(hub->io, NULL) != 0) {
            if (hub->io != NULL)
                event_free(hub->io);
            hub->io = NULL;
            close(hub->fd);
            hub->fd = -1;
        }
    } else if (native) {
        log_warn(COMPONENT, "inotify unavailable, folder watches poll", "error=\"%s\"",
                 strerror(errno));
    }
    return hub;
}

void maildir_watch_hub_free(void *state)
{
    struct maildir_watch_hub *hub = state;
    if (hub == NULL)
        return;
    if (hub->io != NULL)
        event_free(hub->io);
    if (hub->fd >= 0)
        close(hub->fd);
    free(hub->targets);
    free(hub->watches);
    free(hub);
}

static struct mailbox_watch *watch_new(struct maildir_watch_hub *hub, struct mailbox *box,
                                       void (*fn)(void *ctx), void *ctx)
{
    struct mailbox_watch *w = xcalloc(1, sizeof(*w));
    w->hub = hub;
    w->dir = xstrdup(box->dir);
    w->fn = fn;
    w->ctx = ctx;
    w->changed = true; /* nothing is known yet */
    for (size_t k = 0; k < WATCH_TARGETS; k++)
        w->wds[k] = -1;
    hub->watches =
        xgrow(hub->watches, &hub->watch_cap, hub->watch_count + 1, sizeof(*hub->watches));
    hub->watches[hub->watch_count++] = w;
    w->native = start_inotify(w);
    return w;
}

bool maildir_watch_take_changed(struct mailbox_watch *watch)
{
    if (!watch->native)
        return true;
    /* Events are queued by the writer's own system call: whatever another
     * session finished before this question is in the queue now. */
    drain(watch->hub);
    bool changed = watch->changed || watch->lost || watch->distrust;
    /* Own renames were not reported; the index may still hold changes of
     * others: taken in by a refresh since the view's last sync (inside
     * the session's own STORE, say), or in the log past what the handle
     * applied. */
    if (!changed && watch->box != NULL && watch->own_log)
        changed = !watch->mark_valid ||
                  fileindex_foreign_changes(watch->box->index) != watch->foreign_mark;
    if (!changed && watch->log_check)
        changed = watch->box == NULL || fileindex_log_grown(watch->box->index);
    watch->changed = false;
    watch->distrust = false;
    watch->log_check = false;
    own_clear(watch);
    return changed;
}

void maildir_watch_expect(struct mailbox *box, uint32_t mask, const char *name)
{
    struct mailbox_watch *w = box->own_watch;
    if (w == NULL)
        return;
    w->own_log = true;
    if (w->own_count + 1 > OWN_EVENTS_MAX) {
        w->distrust = true; /* too many to track: report as before */
        return;
    }
    if (w->own == NULL)
        w->own = xcalloc(OWN_EVENTS_MAX, sizeof(*w->own));
    w->own[w->own_count++] = (struct own_event){mask, xstrdup(name)};
}

void maildir_watch_expect_rename(struct mailbox *box, const char *from, const char *to)
{
    maildir_watch_expect(box, IN_MOVED_FROM, from);
    maildir_watch_expect(box, IN_MOVED_TO, to);
}

void maildir_watch_expect_uidlist(struct mailbox *box)
{
    if (box->own_watch != NULL)
        box->own_watch->own_uidlist = true;
}

void maildir_watch_distrust(struct mailbox *box)
{
    if (box->own_watch != NULL)
        box->own_watch->distrust = true;
}

void maildir_watch_view_synced(struct mailbox *box)
{
    struct mailbox_watch *w = box->own_watch;
    if (w == NULL)
        return;
    w->foreign_mark = fileindex_foreign_changes(box->index);
    w->mark_valid = true;
}

void maildir_watch_forget_box(struct mailbox *box)
{
    if (box->own_watch != NULL)
        box->own_watch->box = NULL;
    box->own_watch = NULL;
}

/* Only inotify: NULL when the folder cannot be watched that way. */
static struct mailbox_watch *watch_new_native(struct maildir_watch_hub *hub, struct mailbox *box,
                                              void (*fn)(void *ctx), void *ctx)
{
    struct mailbox_watch *w = watch_new(hub, box, fn, ctx);
    if (!w->native) {
        maildir_watch_free(w);
        return NULL;
    }
    if (box->own_watch != NULL)
        box->own_watch->box = NULL; /* a re-SELECT's new watch takes over */
    w->box = box;
    box->own_watch = w;
    return w;
}

struct mailbox_watch *maildir_watch_new(void *state, struct mailbox *box, void (*fn)(void *ctx),
                                        void *ctx, bool native_only, struct petrel_error *err)
{
    struct maildir_watch_hub *hub = state;
    if (native_only)
        return watch_new_native(hub, box, fn, ctx);
    struct mailbox_watch *w = watch_new(hub, box, fn, ctx);
    if (w->native)
        return w;
    take_sig(w, &w->sig);
    w->timer = event_new(hub->base, -1, EV_PERSIST, on_poll, w);
    struct timeval tv = {MAILBOX_WATCH_POLL_MS / 1000, (MAILBOX_WATCH_POLL_MS % 1000) * 1000};
    if (w->timer == NULL || event_add(w->timer, &tv) != 0) {
        maildir_watch_free(w);
        petrel_error_set(err, PETREL_ERR_IO, "cannot start the folder poll timer");
        return NULL;
    }
    return w;
}

bool maildir_watch_is_native(const struct mailbox_watch *watch)
{
    return watch->native;
}

bool maildir_watch_lost(struct mailbox_watch *watch)
{
    drain(watch->hub); /* a removal already done is in the queue */
    return watch->lost;
}

void maildir_watch_free(struct mailbox_watch *watch)
{
    if (watch == NULL)
        return;
    struct maildir_watch_hub *hub = watch->hub;
    for (size_t i = 0; i < hub->watch_count; i++) {
        if (hub->watches[i] == watch) {
            hub->watches[i] = hub->watches[--hub->watch_count];
            break;
        }
    }
    for (size_t k = 0; k < WATCH_TARGETS; k++)
        release_target(hub, watch->wds[k]);
    if (watch->timer != NULL)
        event_free(watch->timer);
    if (watch->box != NULL && watch->box->own_watch == watch)
        watch->box->own_watch = NULL;
    own_clear(watch);
    free(watch->own);
    free(watch->dir);
    free(watch);
}

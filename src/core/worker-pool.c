/* Worker pool: `threads` pthreads take jobs from a bounded FIFO guarded by
 * one mutex; a finished job moves to a second FIFO and the loop thread is
 * woken through a non-blocking pipe watched by a persistent libevent read
 * event. At most one wake-up byte is in the pipe at a time (`wake_pending`),
 * so the pipe never fills however many jobs finish between two loop turns.
 *
 * Shutdown (worker_pool_free) takes the waiting jobs out of the queue before
 * it joins the workers, so only the jobs already running are waited for;
 * the others are handed back with `cancelled` true. */
#include "core/worker-pool.h"

#include "core/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#define WORKER_POOL_MAX_THREADS 64

struct pool_job {
    void *job;
    worker_work_fn *work;
    worker_done_fn *done;
    struct pool_job *next;
};

/* A singly linked FIFO of jobs. */
struct job_list {
    struct pool_job *head;
    struct pool_job *tail;
    size_t count;
};

struct worker_thread {
    struct worker_pool *pool;
    pthread_t thread;
    unsigned index;
};

struct worker_pool {
    struct event_base *base;
    struct event *wake_event;
    int wake_pipe[2]; /* [0] read end (loop), [1] write end (workers) */

    pthread_mutex_t lock;
    pthread_cond_t job_ready;
    /* everything below is guarded by `lock` */
    struct job_list waiting;
    struct job_list finished;
    size_t max_queue;
    size_t running;
    bool wake_pending;
    bool stopping;

    struct worker_thread *threads;
    unsigned thread_count;
};

static void list_push(struct job_list *l, struct pool_job *j)
{
    j->next = NULL;
    if (l->tail != NULL)
        l->tail->next = j;
    else
        l->head = j;
    l->tail = j;
    l->count++;
}

static struct pool_job *list_pop(struct job_list *l)
{
    struct pool_job *j = l->head;
    if (j == NULL)
        return NULL;
    l->head = j->next;
    if (l->head == NULL)
        l->tail = NULL;
    l->count--;
    j->next = NULL;
    return j;
}

/* Moves the whole list out (so callbacks can run without the lock). */
static struct job_list list_take(struct job_list *l)
{
    struct job_list out = *l;
    l->head = l->tail = NULL;
    l->count = 0;
    return out;
}

/* Runs `done` for every job of `l` (in FIFO order) and frees them. */
static void deliver(struct job_list *l, bool cancelled)
{
    struct pool_job *j;
    while ((j = list_pop(l)) != NULL) {
        j->done(j->job, cancelled);
        free(j);
    }
}

/* Called with the lock held: makes sure the loop thread will wake up. */
static void wake_loop_locked(struct worker_pool *pool)
{
    if (pool->wake_pending)
        return;
    pool->wake_pending = true;
    char byte = 1;
    ssize_t n;
    do {
        n = write(pool->wake_pipe[1], &byte, 1);
    } while (n < 0 && errno == EINTR);
    /* EAGAIN cannot happen: at most one byte is ever in the pipe. */
}

static void *worker_main(void *arg)
{
    struct worker_thread *self = arg;
    struct worker_pool *pool = self->pool;
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        while (!pool->stopping && pool->waiting.count == 0)
            pthread_cond_wait(&pool->job_ready, &pool->lock);
        if (pool->stopping)
            break;
        struct pool_job *j = list_pop(&pool->waiting);
        pool->running++;
        pthread_mutex_unlock(&pool->lock);

        j->work(j->job, self->index);

        pthread_mutex_lock(&pool->lock);
        pool->running--;
        list_push(&pool->finished, j);
        wake_loop_locked(pool);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

/* Loop thread: the pipe became readable; deliver what finished. */
static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
    struct worker_pool *pool = arg;
    char drain[64];
    while (read(fd, drain, sizeof(drain)) > 0)
        ;
    pthread_mutex_lock(&pool->lock);
    pool->wake_pending = false;
    struct job_list done = list_take(&pool->finished);
    pthread_mutex_unlock(&pool->lock);
    deliver(&done, false);
}

/* Tells the workers to exit and joins the first `started` of them. */
static void stop_threads(struct worker_pool *pool, unsigned started)
{
    pthread_mutex_lock(&pool->lock);
    pool->stopping = true;
    pthread_cond_broadcast(&pool->job_ready);
    pthread_mutex_unlock(&pool->lock);
    for (unsigned i = 0; i < started; i++)
        pthread_join(pool->threads[i].thread, NULL);
}

static void release(struct worker_pool *pool)
{
    if (pool->wake_event != NULL)
        event_free(pool->wake_event);
    close(pool->wake_pipe[0]);
    close(pool->wake_pipe[1]);
    pthread_cond_destroy(&pool->job_ready);
    pthread_mutex_destroy(&pool->lock);
    free(pool->threads);
    free(pool);
}

struct worker_pool *worker_pool_new(struct event_base *base, unsigned threads, size_t max_queue)
{
    if (threads < 1 || threads > WORKER_POOL_MAX_THREADS || max_queue == 0)
        return NULL;
    struct worker_pool *pool = xcalloc(1, sizeof(*pool));
    pool->base = base;
    pool->max_queue = max_queue;
    if (pipe2(pool->wake_pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
        free(pool);
        return NULL;
    }
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->job_ready, NULL);
    pool->threads = xcalloc(threads, sizeof(*pool->threads));
    pool->wake_event = event_new(base, pool->wake_pipe[0], EV_READ | EV_PERSIST, wake_cb, pool);
    if (pool->wake_event == NULL || event_add(pool->wake_event, NULL) != 0) {
        release(pool);
        return NULL;
    }
    /* Workers must not take the process's signals: those belong to the loop. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    unsigned started = 0;
    for (; started < threads; started++) {
        struct worker_thread *t = &pool->threads[started];
        t->pool = pool;
        t->index = started;
        if (pthread_create(&t->thread, NULL, worker_main, t) != 0)
            break;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (started < threads) {
        stop_threads(pool, started);
        release(pool);
        return NULL;
    }
    pool->thread_count = threads;
    return pool;
}

bool worker_pool_submit(struct worker_pool *pool, void *job, worker_work_fn *work,
                        worker_done_fn *done)
{
    pthread_mutex_lock(&pool->lock);
    if (pool->stopping || pool->waiting.count >= pool->max_queue) {
        pthread_mutex_unlock(&pool->lock);
        return false;
    }
    struct pool_job *j = xmalloc(sizeof(*j));
    j->job = job;
    j->work = work;
    j->done = done;
    list_push(&pool->waiting, j);
    pthread_cond_signal(&pool->job_ready);
    pthread_mutex_unlock(&pool->lock);
    return true;
}

size_t worker_pool_pending(const struct worker_pool *pool)
{
    /* The mutex is not part of the pool's logical state: locking it through
     * a const pointer changes nothing a caller can observe. */
    struct worker_pool *p = (struct worker_pool *)pool;
    pthread_mutex_lock(&p->lock);
    size_t n = p->waiting.count + p->running;
    pthread_mutex_unlock(&p->lock);
    return n;
}

unsigned worker_pool_threads(const struct worker_pool *pool)
{
    return pool->thread_count;
}

void worker_pool_free(struct worker_pool *pool)
{
    if (pool == NULL)
        return;
    /* Take the waiting jobs first so no worker starts one of them. */
    pthread_mutex_lock(&pool->lock);
    struct job_list never_ran = list_take(&pool->waiting);
    pthread_mutex_unlock(&pool->lock);
    stop_threads(pool, pool->thread_count);
    /* Workers are gone: no lock needed any more. */
    struct job_list ran = list_take(&pool->finished);
    deliver(&ran, false);
    deliver(&never_ran, true);
    release(pool);
}

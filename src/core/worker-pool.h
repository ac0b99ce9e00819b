/* A small pool of worker threads for work that must not stall an event
 * loop (password hashing, blocking database calls). Jobs queue in a bounded
 * FIFO; each runs `work` on a worker thread, then `done` on the loop thread
 * that owns the pool. `work` must touch nothing the loop uses; `done` may.
 * The pool wakes its loop through a pipe watched by a libevent event. */
#ifndef PETREL_CORE_WORKER_POOL_H
#define PETREL_CORE_WORKER_POOL_H

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>

struct worker_pool;

/* Runs on a worker; `worker_index` is 0..threads-1 (for per-thread state
 * such as one database connection per worker). */
typedef void worker_work_fn(void *job, unsigned worker_index);
/* Runs on the loop thread after `work`, or with `cancelled` true when the
 * pool is freed before the job ran. */
typedef void worker_done_fn(void *job, bool cancelled);

/* Starts `threads` workers (1..64) with room for `max_queue` waiting jobs.
 * NULL when threads cannot be created. */
struct worker_pool *worker_pool_new(struct event_base *base, unsigned threads, size_t max_queue);
/* Queues a job. False (nothing queued) when the queue is full: the caller
 * answers "busy" instead of piling up work. */
bool worker_pool_submit(struct worker_pool *pool, void *job, worker_work_fn *work,
                        worker_done_fn *done);
/* Jobs queued or running. */
size_t worker_pool_pending(const struct worker_pool *pool);
unsigned worker_pool_threads(const struct worker_pool *pool);
/* Waits for running jobs to finish, calls `done(job, true)` for jobs that
 * never ran and `done(job, false)` for finished ones not yet delivered,
 * joins the threads. */
void worker_pool_free(struct worker_pool *pool);

#endif

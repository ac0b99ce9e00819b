/* Unit tests for core/worker-pool.h on a real event_base: jobs run on
 * workers and complete on the loop thread, a full queue refuses, every
 * worker index is in range (and all of them are used under load), and
 * freeing the pool cancels the jobs that never ran while delivering the ones
 * that did. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/worker-pool.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_JOBS 256

/* A gate the work functions wait at until the test opens it. */
struct gate {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    bool open;
    unsigned waiting; /* work functions blocked at the gate */
};

struct test_job {
    struct gate *gate; /* NULL: do not wait */
    pthread_barrier_t *barrier;
    atomic_bool ran;
    atomic_uint worker;
    pthread_t work_thread;
    bool done;
    bool cancelled;
    bool done_on_loop_thread;
    unsigned done_order;
};

static pthread_t loop_thread;
static unsigned done_count;

static void gate_init(struct gate *g)
{
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->changed, NULL);
    g->open = false;
    g->waiting = 0;
}

static void gate_destroy(struct gate *g)
{
    pthread_cond_destroy(&g->changed);
    pthread_mutex_destroy(&g->lock);
}

static void gate_open(struct gate *g)
{
    pthread_mutex_lock(&g->lock);
    g->open = true;
    pthread_cond_broadcast(&g->changed);
    pthread_mutex_unlock(&g->lock);
}

/* Waits until `n` work functions are blocked at the gate. */
static void gate_wait_for(struct gate *g, unsigned n)
{
    pthread_mutex_lock(&g->lock);
    while (g->waiting < n)
        pthread_cond_wait(&g->changed, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

static void work(void *arg, unsigned worker_index)
{
    struct test_job *j = arg;
    j->work_thread = pthread_self();
    atomic_store(&j->worker, worker_index);
    if (j->barrier != NULL)
        pthread_barrier_wait(j->barrier);
    if (j->gate != NULL) {
        pthread_mutex_lock(&j->gate->lock);
        j->gate->waiting++;
        pthread_cond_broadcast(&j->gate->changed);
        while (!j->gate->open)
            pthread_cond_wait(&j->gate->changed, &j->gate->lock);
        pthread_mutex_unlock(&j->gate->lock);
    }
    atomic_store(&j->ran, true);
}

static void done(void *arg, bool cancelled)
{
    struct test_job *j = arg;
    assert_false(j->done);
    j->done = true;
    j->cancelled = cancelled;
    j->done_on_loop_thread = pthread_equal(pthread_self(), loop_thread);
    j->done_order = done_count++;
}

static void init_jobs(struct test_job *jobs, size_t n)
{
    memset(jobs, 0, n * sizeof(*jobs));
    for (size_t i = 0; i < n; i++)
        atomic_store(&jobs[i].worker, 999);
    done_count = 0;
    loop_thread = pthread_self();
}

/* Runs the loop until `want` completions were delivered (5 s at most). */
static void run_until_done(struct event_base *base, unsigned want)
{
    time_t deadline = time(NULL) + 5;
    while (done_count < want) {
        assert_true(time(NULL) < deadline);
        struct timeval tv = {0, 50000};
        event_base_loopexit(base, &tv);
        event_base_loop(base, EVLOOP_ONCE);
    }
}

static void test_jobs_run_on_workers_and_complete_on_the_loop(void **state)
{
    struct event_base *base = event_base_new();
    struct worker_pool *pool = worker_pool_new(base, 3, 100);
    assert_non_null(pool);
    assert_int_equal(worker_pool_threads(pool), 3);
    static struct test_job jobs[50];
    init_jobs(jobs, 50);
    for (size_t i = 0; i < 50; i++)
        assert_true(worker_pool_submit(pool, &jobs[i], work, done));
    run_until_done(base, 50);
    assert_int_equal(worker_pool_pending(pool), 0);
    for (size_t i = 0; i < 50; i++) {
        assert_true(jobs[i].done);
        assert_false(jobs[i].cancelled);
        assert_true(atomic_load(&jobs[i].ran));
        assert_true(jobs[i].done_on_loop_thread);
        assert_false(pthread_equal(jobs[i].work_thread, loop_thread));
        assert_true(atomic_load(&jobs[i].worker) < 3);
    }
    worker_pool_free(pool);
    assert_int_equal(done_count, 50); /* nothing delivered twice */
    event_base_free(base);
}

static void test_every_worker_index_is_used_once_under_load(void **state)
{
    enum { THREADS = 4 };
    struct event_base *base = event_base_new();
    struct worker_pool *pool = worker_pool_new(base, THREADS, 16);
    assert_non_null(pool);
    /* Each job waits at a barrier of THREADS parties, so the THREADS jobs
     * can only all pass when they run on THREADS different workers. */
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, THREADS);
    static struct test_job jobs[THREADS];
    init_jobs(jobs, THREADS);
    for (size_t i = 0; i < THREADS; i++) {
        jobs[i].barrier = &barrier;
        assert_true(worker_pool_submit(pool, &jobs[i], work, done));
    }
    run_until_done(base, THREADS);
    bool seen[THREADS] = {false};
    for (size_t i = 0; i < THREADS; i++) {
        unsigned w = atomic_load(&jobs[i].worker);
        assert_true(w < THREADS);
        assert_false(seen[w]);
        seen[w] = true;
    }
    worker_pool_free(pool);
    pthread_barrier_destroy(&barrier);
    event_base_free(base);
}

static void test_full_queue_refuses_and_recovers(void **state)
{
    struct event_base *base = event_base_new();
    struct worker_pool *pool = worker_pool_new(base, 2, 3);
    assert_non_null(pool);
    struct gate gate;
    gate_init(&gate);
    static struct test_job jobs[6];
    init_jobs(jobs, 6);
    for (size_t i = 0; i < 6; i++)
        jobs[i].gate = &gate;
    /* Two jobs occupy both workers ... */
    assert_true(worker_pool_submit(pool, &jobs[0], work, done));
    assert_true(worker_pool_submit(pool, &jobs[1], work, done));
    gate_wait_for(&gate, 2);
    /* ... three wait (max_queue), the sixth is refused and never runs. */
    assert_true(worker_pool_submit(pool, &jobs[2], work, done));
    assert_true(worker_pool_submit(pool, &jobs[3], work, done));
    assert_true(worker_pool_submit(pool, &jobs[4], work, done));
    assert_int_equal(worker_pool_pending(pool), 5);
    assert_false(worker_pool_submit(pool, &jobs[5], work, done));
    assert_int_equal(worker_pool_pending(pool), 5);
    gate_open(&gate);
    run_until_done(base, 5);
    assert_false(jobs[5].done);
    assert_false(atomic_load(&jobs[5].ran));
    assert_int_equal(worker_pool_pending(pool), 0);
    /* Room again. */
    jobs[5].gate = NULL;
    assert_true(worker_pool_submit(pool, &jobs[5], work, done));
    run_until_done(base, 6);
    assert_false(jobs[5].cancelled);
    worker_pool_free(pool);
    gate_destroy(&gate);
    event_base_free(base);
}

struct opener {
    struct worker_pool *pool;
    struct gate *gate;
};

/* Opens the gate once worker_pool_free() has taken the waiting jobs out of
 * the queue (only the running one is still pending). */
static void *open_after_dequeue(void *arg)
{
    struct opener *o = arg;
    while (worker_pool_pending(o->pool) != 1)
        usleep(1000);
    gate_open(o->gate);
    return NULL;
}

static void test_free_cancels_queued_jobs_and_waits_for_running_ones(void **state)
{
    struct event_base *base = event_base_new();
    struct worker_pool *pool = worker_pool_new(base, 1, 10);
    assert_non_null(pool);
    struct gate gate;
    gate_init(&gate);
    static struct test_job jobs[5];
    init_jobs(jobs, 5);
    jobs[0].gate = &gate;
    for (size_t i = 0; i < 5; i++)
        assert_true(worker_pool_submit(pool, &jobs[i], work, done));
    gate_wait_for(&gate, 1);
    assert_int_equal(worker_pool_pending(pool), 5);
    struct opener o = {pool, &gate};
    pthread_t opener;
    assert_int_equal(pthread_create(&opener, NULL, open_after_dequeue, &o), 0);
    worker_pool_free(pool); /* returns only after job 0 finished */
    pthread_join(opener, NULL);
    assert_int_equal(done_count, 5);
    assert_true(jobs[0].done);
    assert_false(jobs[0].cancelled);
    assert_true(atomic_load(&jobs[0].ran));
    assert_true(jobs[0].done_on_loop_thread);
    for (size_t i = 1; i < 5; i++) {
        assert_true(jobs[i].done);
        assert_true(jobs[i].cancelled);
        assert_false(atomic_load(&jobs[i].ran));
        /* cancelled jobs are handed back in the order they were queued */
        assert_int_equal(jobs[i].done_order, i);
    }
    gate_destroy(&gate);
    event_base_free(base);
}

static void test_free_delivers_finished_but_undelivered_jobs(void **state)
{
    struct event_base *base = event_base_new();
    struct worker_pool *pool = worker_pool_new(base, 2, 10);
    assert_non_null(pool);
    static struct test_job jobs[4];
    init_jobs(jobs, 4);
    for (size_t i = 0; i < 4; i++)
        assert_true(worker_pool_submit(pool, &jobs[i], work, done));
    /* The loop never runs: the completions wait in the pool. */
    while (worker_pool_pending(pool) != 0)
        usleep(1000);
    assert_int_equal(done_count, 0);
    worker_pool_free(pool);
    assert_int_equal(done_count, 4);
    for (size_t i = 0; i < 4; i++) {
        assert_true(jobs[i].done);
        assert_false(jobs[i].cancelled);
    }
    /* The wake-up byte left in the pipe belongs to a freed event: running
     * the loop again must not touch the pool. */
    event_base_loop(base, EVLOOP_NONBLOCK);
    event_base_free(base);
}

static void test_bad_arguments_give_no_pool(void **state)
{
    struct event_base *base = event_base_new();
    assert_null(worker_pool_new(base, 0, 10));
    assert_null(worker_pool_new(base, 65, 10));
    assert_null(worker_pool_new(base, 1, 0));
    struct worker_pool *pool = worker_pool_new(base, 64, 1);
    assert_non_null(pool);
    assert_int_equal(worker_pool_threads(pool), 64);
    worker_pool_free(pool);
    worker_pool_free(NULL);
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jobs_run_on_workers_and_complete_on_the_loop),
        cmocka_unit_test(test_every_worker_index_is_used_once_under_load),
        cmocka_unit_test(test_full_queue_refuses_and_recovers),
        cmocka_unit_test(test_free_cancels_queued_jobs_and_waits_for_running_ones),
        cmocka_unit_test(test_free_delivers_finished_but_undelivered_jobs),
        cmocka_unit_test(test_bad_arguments_give_no_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The library's work queue (src/lib/common/workq.c): order, priority, take, cancel,
 * throttling, no job on two threads at once, and stop. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "check.h"
#include "common/workq.h"

struct tjob {
    struct pcr_job job;
    int id;
    unsigned sleep_ms;
    atomic_int runs, inside, overlap;
};

static pthread_mutex_t order_lock = PTHREAD_MUTEX_INITIALIZER;
static int order[64], norder;
static atomic_int concurrent, max_concurrent;
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_open = 1;

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void run(struct pcr_job *j)
{
    struct tjob *t = (struct tjob *)j;
    int now;

    if (atomic_fetch_add(&t->inside, 1) > 0)
        atomic_fetch_add(&t->overlap, 1);
    now = atomic_fetch_add(&concurrent, 1) + 1;
    for (int m = atomic_load(&max_concurrent); now > m;)
        if (atomic_compare_exchange_weak(&max_concurrent, &m, now))
            break;
    pthread_mutex_lock(&gate_lock);
    while (!gate_open)
        pthread_cond_wait(&gate_cv, &gate_lock);
    pthread_mutex_unlock(&gate_lock);
    sleep_ms(t->sleep_ms);
    pthread_mutex_lock(&order_lock);
    if (norder < 64)
        order[norder++] = t->id;
    pthread_mutex_unlock(&order_lock);
    atomic_fetch_add(&t->runs, 1);
    atomic_fetch_sub(&concurrent, 1);
    atomic_fetch_sub(&t->inside, 1);
}

static void gate(int open)
{
    pthread_mutex_lock(&gate_lock);
    gate_open = open;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_lock);
}

static void init_job(struct tjob *t, int id, const void *owner, unsigned ms)
{
    memset(t, 0, sizeof(*t));
    t->job.run = run;
    t->job.owner = owner;
    t->id = id;
    t->sleep_ms = ms;
}

/* Wait (bounded) until the queue is empty and idle. */
static int drain(struct pcr_workq *q)
{
    for (int i = 0; i < 1000; i++) {
        if (pcr_workq_pending(q) == 0)
            return 1;
        sleep_ms(5);
    }
    return 0;
}

static atomic_int cancel_returned;
static int owner_a;

static void *cancel_a(void *arg)
{
    pcr_workq_cancel(arg, &owner_a);
    atomic_store(&cancel_returned, 1);
    return NULL;
}

static atomic_int dones, in_done;

/* A job's done(): slow, then frees it (it was malloc'ed). */
static void done_free(struct pcr_job *j)
{
    atomic_store(&in_done, 1);
    sleep_ms(80);
    atomic_fetch_add(&dones, 1);
    free(j);
}

/* Where job @id ended in the order, or 64 if it did not. */
static int pos(int id)
{
    for (int i = 0; i < norder; i++)
        if (order[i] == id)
            return i;
    return 64;
}

static void reset(void)
{
    norder = 0;
    atomic_store(&max_concurrent, 0);
}

int main(void)
{
    struct pcr_workq q;
    struct tjob t[8];
    int b;
    const void *a = &owner_a;

    /* FIFO on one thread, and a front push jumps the queue */
    CHECK(pcr_workq_init(&q, 1) == 0, "init");
    reset();
    gate(0);
    init_job(&t[0], 0, a, 0);
    CHECK(pcr_workq_push(&q, &t[0].job, false), "push");
    sleep_ms(50); /* t0 is running (blocked at the gate) */
    for (int i = 1; i < 5; i++) {
        init_job(&t[i], i, a, 0);
        pcr_workq_push(&q, &t[i].job, false);
    }
    pcr_workq_push(&q, &t[4].job, true);  /* a reader waits for 4: it goes first */
    pcr_workq_push(&q, &t[2].job, false); /* queued already: stays where it is */
    CHECK(pcr_workq_busy(&q, &t[3].job), "queued job busy");
    CHECK(pcr_workq_take(&q, &t[3].job), "take a queued job");
    CHECK(!pcr_workq_take(&q, &t[3].job), "take twice");
    gate(1);
    CHECK(drain(&q), "drained");
    CHECK(norder == 4, "ran %d jobs, want 4", norder);
    CHECK(order[0] == 0 && order[1] == 4 && order[2] == 1 && order[3] == 2, "order %d %d %d %d",
          order[0], order[1], order[2], order[3]);
    CHECK(atomic_load(&t[3].runs) == 0, "taken job ran");
    pcr_workq_free(&q);

    /* four threads, throttled to two; then to all four */
    CHECK(pcr_workq_init(&q, 4) == 0, "init 4");
    reset();
    pcr_workq_limit(&q, 2);
    for (int i = 0; i < 8; i++) {
        init_job(&t[i], i, a, 30);
        pcr_workq_push(&q, &t[i].job, false);
    }
    CHECK(drain(&q), "drained");
    CHECK(atomic_load(&max_concurrent) == 2, "limit 2: %d at once", atomic_load(&max_concurrent));
    reset();
    pcr_workq_limit(&q, 99); /* clamped to 4 */
    for (int i = 0; i < 8; i++)
        pcr_workq_push(&q, &t[i].job, false);
    CHECK(drain(&q), "drained");
    CHECK(atomic_load(&max_concurrent) >= 3 && atomic_load(&max_concurrent) <= 4,
          "limit 4: %d at once", atomic_load(&max_concurrent));

    /* a job pushed while it runs runs again afterwards, never on two threads */
    reset();
    init_job(&t[0], 0, a, 40);
    pcr_workq_push(&q, &t[0].job, false);
    sleep_ms(10);
    pcr_workq_push(&q, &t[0].job, true);
    pcr_workq_push(&q, &t[0].job, false);
    CHECK(drain(&q), "drained");
    CHECK(atomic_load(&t[0].runs) == 2, "re-pushed job ran %d times, want 2",
          atomic_load(&t[0].runs));
    CHECK(atomic_load(&t[0].overlap) == 0, "a job ran on two threads at once");

    /* background work (prefetch) never holds every slot: at most 3 of 4 run, and a
     * foreground job pushed meanwhile starts at once, not after them */
    reset();
    gate(0);
    for (int i = 0; i < 6; i++) {
        init_job(&t[i], i, a, i == 3 || i == 4 ? 60 : 0);
        CHECK(pcr_workq_push_bg(&q, &t[i].job), "push_bg");
    }
    sleep_ms(100);
    CHECK(atomic_load(&concurrent) == 3, "background: %d of 4 run, want 3",
          atomic_load(&concurrent));
    init_job(&t[6], 6, a, 0);
    pcr_workq_push(&q, &t[6].job, false);
    sleep_ms(100);
    CHECK(atomic_load(&concurrent) == 4, "foreground beside background: %d run, want 4",
          atomic_load(&concurrent));
    pcr_workq_push(&q, &t[5].job, true); /* a reader waits for a queued prefetch */
    gate(1);
    CHECK(drain(&q), "drained");
    CHECK(norder == 7, "ran %d jobs, want 7", norder);
    /* t5 became foreground: it went before the background jobs queued before it
     * (they take 60 ms, it none: it ends first) */
    CHECK(pos(5) < pos(3) && pos(5) < pos(4), "order %d %d %d %d %d %d %d", order[0], order[1],
          order[2], order[3], order[4], order[5], order[6]);

    /* at a limit of 1, background work runs only while nothing else is queued: a
     * foreground job waits for the one in flight and then goes first */
    reset();
    pcr_workq_limit(&q, 1);
    gate(0);
    for (int i = 0; i < 3; i++) {
        init_job(&t[i], i, a, 0);
        pcr_workq_push_bg(&q, &t[i].job);
    }
    sleep_ms(50); /* t0 runs */
    init_job(&t[3], 3, a, 0);
    pcr_workq_push(&q, &t[3].job, false); /* at the back, still first to run */
    gate(1);
    CHECK(drain(&q), "drained");
    CHECK(norder == 4 && order[0] == 0 && order[1] == 3, "limit 1: order %d %d %d %d", order[0],
          order[1], order[2], order[3]);
    CHECK(atomic_load(&max_concurrent) == 1, "limit 1: %d at once", atomic_load(&max_concurrent));
    pcr_workq_limit(&q, 4);

    /* cancel: an owner's queued jobs are dropped, its running one is waited for */
    reset();
    pcr_workq_limit(&q, 1);
    gate(0);
    init_job(&t[0], 0, a, 0);
    init_job(&t[1], 1, a, 0);
    init_job(&t[2], 2, &b, 0);
    pcr_workq_push(&q, &t[0].job, false);
    sleep_ms(30);
    pcr_workq_push(&q, &t[1].job, false);
    pcr_workq_push(&q, &t[2].job, false);
    {
        pthread_t canceller;
        pthread_create(&canceller, NULL, cancel_a, &q);
        sleep_ms(50);
        CHECK(!atomic_load(&cancel_returned), "cancel returned while a job of its owner ran");
        CHECK(!pcr_workq_busy(&q, &t[1].job), "cancelled job still queued");
        gate(1);
        pthread_join(canceller, NULL);
    }
    CHECK(atomic_load(&t[0].runs) == 1, "cancel returned before the running job ended");
    CHECK(drain(&q), "drained");
    CHECK(atomic_load(&t[1].runs) == 0, "a cancelled job ran");
    CHECK(atomic_load(&t[2].runs) == 1, "another owner's job did not run");

    /* done(): after the run, once per run not queued again; the job may free itself
     * there (ASan), and cancel() waits until done() returned */
    {
        struct tjob *h = malloc(sizeof(*h));
        CHECK(h != NULL, "malloc");
        init_job(h, 7, &b, 0);
        h->job.done = done_free;
        atomic_store(&dones, 0);
        pcr_workq_push(&q, &h->job, false);
        for (int i = 0; i < 2000 && !atomic_load(&in_done); i++)
            sleep_ms(1); /* it runs, then sleeps in done() */
        CHECK(atomic_load(&in_done), "done() called");
        pcr_workq_cancel(&q, &b);
        CHECK(atomic_load(&dones) == 1, "cancel returned before done() did (%d)",
              atomic_load(&dones));
        CHECK(drain(&q), "drained");
    }

    /* free drops what is queued and joins */
    reset();
    gate(0);
    for (int i = 0; i < 4; i++) {
        init_job(&t[i], i, a, 0);
        pcr_workq_push(&q, &t[i].job, false);
    }
    sleep_ms(20);
    gate(1);
    pcr_workq_free(&q);
    CHECK(norder == 1, "free ran %d jobs, want only the running one", norder);

    /* start(): every thread at once, before any job */
    CHECK(pcr_workq_init(&q, 3) == 0, "init 3");
    CHECK(q.nthreads == 0, "threads before the first job: %u", q.nthreads);
    CHECK(pcr_workq_start(&q) == 0, "start");
    CHECK(q.nthreads == 3, "threads after start: %u, want 3", q.nthreads);
    CHECK(pcr_workq_start(&q) == 0 && q.nthreads == 3, "start twice");
    reset();
    init_job(&t[0], 0, a, 0);
    pcr_workq_push(&q, &t[0].job, false);
    CHECK(drain(&q) && atomic_load(&t[0].runs) == 1, "a job on started threads");
    pcr_workq_free(&q);

    /* a monotonic timed wait times out */
    {
        pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
        pthread_cond_t cv;
        CHECK(pcr_cond_init_monotonic(&cv) == 0, "monotonic cond");
        pthread_mutex_lock(&m);
        CHECK(pcr_cond_wait_ms(&cv, &m, 20) == -ETIMEDOUT, "timed wait");
        pthread_mutex_unlock(&m);
        pthread_cond_destroy(&cv);
    }
    return check_done("workq");
}

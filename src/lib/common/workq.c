/* pcrfs — one work queue for the library's background threads (see workq.h). */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include "common/workq.h"

enum { JOB_IDLE, JOB_QUEUED, JOB_RUNNING };
enum { AGAIN_NO, AGAIN_BACK, AGAIN_FRONT };

int pcr_cond_init_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    int rc;

    if ((rc = pthread_condattr_init(&ca)) != 0)
        return -rc;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    rc = pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
    return -rc;
}

int pcr_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *m, uint64_t ms)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return -pthread_cond_timedwait(cv, m, &ts);
}

static void unlink_job(struct pcr_workq *q, struct pcr_job *j)
{
    j->prev->next = j->next;
    j->next->prev = j->prev;
    j->prev = j->next = NULL;
    q->queued--;
    q->queued_fg -= !j->bg;
}

/* Queue @j, idle (under the lock). */
static void link_job(struct pcr_workq *q, struct pcr_job *j, bool front)
{
    struct pcr_job *at = front ? &q->queue : q->queue.prev;

    j->prev = at;
    j->next = at->next;
    at->next->prev = j;
    at->next = j;
    j->state = JOB_QUEUED;
    q->queued++;
    q->queued_fg += !j->bg;
}

/* The job that may run now, or NULL (under the lock): the first foreground job,
 * else the first background one while fewer than allowed - 1 of them run (at
 * allowed = 1: the one slot, only while no foreground job is queued). Foreground
 * jobs are pushed to the front in practice, so the walk is one step. */
static struct pcr_job *next_job(struct pcr_workq *q)
{
    unsigned bg_max = q->allowed > 1 ? q->allowed - 1 : 1;
    struct pcr_job *j = q->queue.next;

    if (q->running >= q->allowed || j == &q->queue)
        return NULL;
    if (q->queued_fg) {
        while (j->bg)
            j = j->next;
        return j;
    }
    return q->running_bg < bg_max ? j : NULL;
}

static void *worker(void *arg)
{
    struct pcr_workq_slot *slot = arg;
    struct pcr_workq *q = slot->q;

    pthread_mutex_lock(&q->lock);
    for (;;) {
        struct pcr_job *j;
        if (q->stop)
            break;
        j = next_job(q);
        if (!j) {
            q->idle++;
            pthread_cond_wait(&q->work, &q->lock);
            q->idle--;
            continue;
        }
        unlink_job(q, j);
        j->state = JOB_RUNNING;
        j->again = AGAIN_NO;
        slot->cur = j;
        slot->owner = j->owner;
        slot->active = true;
        slot->bg = j->bg;
        q->running++;
        q->running_bg += slot->bg;
        pthread_mutex_unlock(&q->lock);
        j->run(j);
        pthread_mutex_lock(&q->lock);
        q->running--;
        q->running_bg -= slot->bg;
        j->state = JOB_IDLE;
        if (j->again != AGAIN_NO && !q->stop) {
            link_job(q, j, j->again == AGAIN_FRONT);
        } else if (j->done) {
            /* done() may free j; the slot stays active, so cancel() waits for
             * done() too */
            slot->cur = NULL;
            pthread_mutex_unlock(&q->lock);
            j->done(j);
            pthread_mutex_lock(&q->lock);
        }
        slot->cur = NULL;
        slot->active = false;
        pthread_cond_broadcast(&q->done);
        if (q->queued)
            pthread_cond_broadcast(&q->work); /* a slot is free again (for which job:
                                                 each idle thread looks) */
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

int pcr_workq_init(struct pcr_workq *q, unsigned threads)
{
    int rc;

    *q = (struct pcr_workq){.max = threads ? threads : 1};
    q->allowed = q->max;
    q->queue.prev = q->queue.next = &q->queue;
    q->slots = calloc(q->max, sizeof(*q->slots));
    if (!q->slots)
        return -ENOMEM;
    if ((rc = pthread_mutex_init(&q->lock, NULL)) != 0) {
        free(q->slots);
        q->slots = NULL;
        return -rc;
    }
    pthread_cond_init(&q->work, NULL);
    if ((rc = pcr_cond_init_monotonic(&q->done)) != 0) {
        pthread_cond_destroy(&q->work);
        pthread_mutex_destroy(&q->lock);
        free(q->slots);
        q->slots = NULL;
        return rc;
    }
    return 0;
}

void pcr_workq_free(struct pcr_workq *q)
{
    if (!q->slots)
        return;
    pthread_mutex_lock(&q->lock);
    q->stop = true;
    /* every queued job dropped in one walk, the queue emptied after it (not one
     * unlink_job() each: the analyzer lost the ring's links and saw a NULL deref) */
    for (struct pcr_job *j = q->queue.next, *nx; j != &q->queue; j = nx) {
        nx = j->next;
        j->prev = j->next = NULL;
        j->state = JOB_IDLE;
    }
    q->queue.next = q->queue.prev = &q->queue;
    q->queued = q->queued_fg = 0;
    pthread_cond_broadcast(&q->work);
    pthread_mutex_unlock(&q->lock);
    for (unsigned i = 0; i < q->nthreads; i++)
        pthread_join(q->slots[i].thread, NULL);
    pthread_cond_destroy(&q->work);
    pthread_cond_destroy(&q->done);
    pthread_mutex_destroy(&q->lock);
    free(q->slots);
    q->slots = NULL;
}

/* Start one more thread if the queue holds more jobs than idle threads can take
 * (under the lock), with every signal blocked. @return whether any thread runs. */
/* Start one more thread (under the lock), with every signal blocked. @return 0 or
 * -errno of pthread_create(). */
static int add_thread(struct pcr_workq *q)
{
    struct pcr_workq_slot *s = &q->slots[q->nthreads];
    sigset_t all, old;
    int rc;

    s->q = q;
    s->cur = NULL;
    s->active = false;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&s->thread, NULL, worker, s);
    if (rc == 0)
        q->nthreads++;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return -rc;
}

/* Start one more thread if the queue holds more jobs than idle threads can take
 * (under the lock). @return whether any thread runs. */
static bool grow(struct pcr_workq *q)
{
    if (q->nthreads < q->max && q->queued > q->idle)
        add_thread(q);
    return q->nthreads > 0;
}

int pcr_workq_start(struct pcr_workq *q)
{
    int rc = 0;

    pthread_mutex_lock(&q->lock);
    while (rc == 0 && q->nthreads < q->max)
        rc = add_thread(q);
    pthread_mutex_unlock(&q->lock);
    return rc;
}

static bool push_locked(struct pcr_workq *q, struct pcr_job *j, bool front)
{
    bool ok = true;

    if (q->stop) {
        ok = false;
    } else if (j->state == JOB_RUNNING) {
        /* queued again when this run ends: a job never runs twice at once */
        if (front || j->again == AGAIN_NO)
            j->again = front ? AGAIN_FRONT : AGAIN_BACK;
    } else if (j->state == JOB_QUEUED && !front) {
        /* already waiting its turn */
    } else {
        if (j->state == JOB_QUEUED)
            unlink_job(q, j);
        link_job(q, j, front);
        if (!grow(q)) {
            unlink_job(q, j);
            j->state = JOB_IDLE;
            ok = false;
        } else {
            /* every idle thread looks: the one woken by a signal might find only
             * background work it may not start while another could run this */
            pthread_cond_broadcast(&q->work);
        }
    }
    return ok;
}

bool pcr_workq_push(struct pcr_workq *q, struct pcr_job *j, bool front)
{
    bool ok;

    pthread_mutex_lock(&q->lock);
    if (j->bg && j->state == JOB_QUEUED)
        q->queued_fg++; /* a foreground job from now on, wherever it waits */
    j->bg = false;
    ok = push_locked(q, j, front);
    pthread_mutex_unlock(&q->lock);
    return ok;
}

bool pcr_workq_push_bg(struct pcr_workq *q, struct pcr_job *j)
{
    bool ok;

    pthread_mutex_lock(&q->lock);
    if (j->state == JOB_IDLE)
        j->bg = true;
    ok = push_locked(q, j, false);
    pthread_mutex_unlock(&q->lock);
    return ok;
}

bool pcr_workq_take(struct pcr_workq *q, struct pcr_job *j)
{
    bool was;

    pthread_mutex_lock(&q->lock);
    was = j->state == JOB_QUEUED;
    if (was) {
        unlink_job(q, j);
        j->state = JOB_IDLE;
    } else if (j->state == JOB_RUNNING) {
        j->again = AGAIN_NO;
    }
    pthread_mutex_unlock(&q->lock);
    return was;
}

bool pcr_workq_busy(struct pcr_workq *q, const struct pcr_job *j)
{
    bool busy;

    pthread_mutex_lock(&q->lock);
    busy = j->state != JOB_IDLE;
    pthread_mutex_unlock(&q->lock);
    return busy;
}

static bool owner_runs(struct pcr_workq *q, const void *owner)
{
    for (unsigned i = 0; i < q->nthreads; i++)
        if (q->slots[i].active && q->slots[i].owner == owner)
            return true;
    return false;
}

void pcr_workq_cancel(struct pcr_workq *q, const void *owner)
{
    pthread_mutex_lock(&q->lock);
    for (struct pcr_job *j = q->queue.next, *n; j != &q->queue; j = n) {
        n = j->next;
        if (j->owner == owner) {
            unlink_job(q, j);
            j->state = JOB_IDLE;
        }
    }
    for (unsigned i = 0; i < q->nthreads; i++)
        if (q->slots[i].cur && q->slots[i].cur->owner == owner)
            q->slots[i].cur->again = AGAIN_NO;
    while (owner_runs(q, owner))
        pthread_cond_wait(&q->done, &q->lock);
    pthread_mutex_unlock(&q->lock);
}

void pcr_workq_limit(struct pcr_workq *q, unsigned n)
{
    pthread_mutex_lock(&q->lock);
    q->allowed = n < 1 ? 1 : n > q->max ? q->max : n;
    pthread_cond_broadcast(&q->work);
    pthread_mutex_unlock(&q->lock);
}

unsigned pcr_workq_pending(struct pcr_workq *q)
{
    unsigned n;

    pthread_mutex_lock(&q->lock);
    n = q->queued + q->running;
    pthread_mutex_unlock(&q->lock);
    return n;
}

/* pcrfs — one work queue for the library's background threads.
 *
 * Three modules of the library do work behind their readers' backs: the POSIX
 * backend's readahead, the object-storage cache's fetches and refurb/'s renders.
 * Each is a FIFO of jobs drained by a few threads; this is that machinery, once:
 *
 * - Threads start lazily, one per push while the queue holds more jobs than there
 *   are idle threads, up to the queue's thread count, with every signal blocked
 *   (signals are the readers' and the daemon's business). A store opened before a
 *   fork() has no threads in the child; the first push there starts them.
 * - A job may be pushed to the front (a reader waits for it) or back; pushing a
 *   queued job again to the front moves it there. A job never runs on two threads at
 *   once: pushed while it runs, it is queued again when that run ends.
 * - A job can be taken back while queued (its owner runs it itself, or no longer
 *   needs it), and cancel() drops an owner's queued jobs and waits until none of its
 *   jobs runs: after it returns, the owner may be freed.
 * - A job may free itself, in done(): called on the thread that ran it once a run
 *   ended and the job was not queued again, when the queue no longer touches it
 *   (run() may not: the queue marks the job idle after run() returns). The owner
 *   makes sure nobody pushes the job meanwhile; cancel() and free() wait for done()
 *   as for run().
 * - limit() bounds how many jobs run at once (throttling), without stopping threads.
 * - A job may be pushed as background work (push_bg(): the object-storage cache's
 *   prefetch). Background jobs never hold every slot: at most limit - 1 of them run
 *   at once when the limit is above 1, so a job pushed by push() (a reader waits for
 *   it) starts as soon as one job in flight ends, or at once; at a limit of 1 one
 *   runs only while no other job is queued (the others are at the front anyway).
 *   push() of a background job makes it a foreground one.
 * - Every timed wait is on CLOCK_MONOTONIC: a clock step never shortens or stretches
 *   a deadline.
 *
 * The queue's lock is its own and is never held while a job runs. A caller may hold
 * its own lock while it calls push(), take(), limit() or cancel() — never while the
 * job's run() would need it and cancel() waits, i.e. cancel() must be called without
 * any lock run() takes.
 */
#ifndef PCRFS_COMMON_WORKQ_H
#define PCRFS_COMMON_WORKQ_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct pcr_job {
    struct pcr_job *prev, *next; /* in the queue, while queued */
    void (*run)(struct pcr_job *j);
    void (*done)(struct pcr_job *j); /* optional: see above */
    const void *owner;               /* what pcr_workq_cancel() matches */
    int state;                       /* the queue's: idle, queued, running */
    int again;                       /* pushed while running: 1 back, 2 front, once it ends */
    bool bg;                         /* the queue's: background work (push_bg()) */
};

struct pcr_workq_slot {
    struct pcr_workq *q;
    pthread_t thread;
    struct pcr_job *cur; /* the job this thread runs, or NULL (also in its done()) */
    const void *owner;   /* cur's owner, while active */
    bool active;         /* from the start of a run until its done() returned */
    bool bg;             /* cur was taken as background work */
};

struct pcr_workq {
    pthread_mutex_t lock;
    pthread_cond_t work;  /* a job was queued, a slot freed, or stop */
    pthread_cond_t done;  /* a job ended (CLOCK_MONOTONIC) */
    struct pcr_job queue; /* circular list, sentinel */
    struct pcr_workq_slot *slots;
    unsigned max, nthreads, idle;
    unsigned running, allowed;
    unsigned running_bg; /* of running: background jobs */
    unsigned queued;
    unsigned queued_fg; /* of queued: foreground jobs */
    bool stop;
};

/* Set up @q for at most @threads threads (≥ 1). @return 0 or -errno. */
int pcr_workq_init(struct pcr_workq *q, unsigned threads);
/* Stop: queued jobs are dropped unrun, running ones finish, threads are joined. */
void pcr_workq_free(struct pcr_workq *q);
/* Queue @j (its run and owner set) at the front or the back; a queued @j pushed to the
 * front moves there, a running one is left alone. @return false if no thread runs
 * and none could be started: @j is not queued, the caller runs it itself. */
bool pcr_workq_push(struct pcr_workq *q, struct pcr_job *j, bool front);
/* Queue @j at the back as background work (see above); a job queued or running as
 * foreground work stays so. @return as push(). */
bool pcr_workq_push_bg(struct pcr_workq *q, struct pcr_job *j);
/* Take @j out of the queue. @return whether it was queued (it will not run). */
bool pcr_workq_take(struct pcr_workq *q, struct pcr_job *j);
/* Whether @j is queued or running. */
bool pcr_workq_busy(struct pcr_workq *q, const struct pcr_job *j);
/* Drop @owner's queued jobs and wait until none of its jobs runs. */
void pcr_workq_cancel(struct pcr_workq *q, const void *owner);
/* At most @n jobs (1..threads) run at once from now on. */
void pcr_workq_limit(struct pcr_workq *q, unsigned n);
/* Start every thread now rather than with the first jobs, for a caller that must
 * know at once that it has them (a mount that would otherwise fail later, under
 * load). @return 0 or the -errno of the first thread that could not be started
 * (the others run). Call it where threads may be: not before a fork(). */
int pcr_workq_start(struct pcr_workq *q);
/* Jobs queued and running now (for stats). */
unsigned pcr_workq_pending(struct pcr_workq *q);

/* A condition variable on CLOCK_MONOTONIC, and a wait on one of at most @ms. */
int pcr_cond_init_monotonic(pthread_cond_t *cv);
int pcr_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *m, uint64_t ms);

#endif

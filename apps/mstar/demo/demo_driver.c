/*
 * demo_driver.c — `mstar demo`: the driver process from start to exit code.
 *
 *   1. options and config; the run's private directories; signal handlers
 *   2. fork the two workers (before any ZeroMQ context or device exists here)
 *   3. bind the driver's three entities; wait for both workers' HELLO (their captures done)
 *   4. serve: keep `concurrency` requests in flight, dispatch every message to its role, watch
 *      the workers (a dead one fails what is in flight), the deadline and the signals
 *   5. shut down: wait for the last acknowledgements, SHUTDOWN each worker, collect its report,
 *      reap it; close the driver's entities
 *   6. check: every request accounted for, nothing left in the shm directory or any manager,
 *      a sample of the results equal to an eager run; print the summary; remove the directories
 */
#include "demo_run.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define STARTUP_TIMEOUT_S  300.0 /* the workers' captures included */
#define DRAIN_GRACE_S      10.0  /* after a failure, for the drains to finish */
#define SHUTDOWN_TIMEOUT_S 15.0

/* ---- workers -------------------------------------------------------------------------------- */

/* Reap workers that ended; one that ended before its SHUTDOWN fails the run. */
static void reap(demo_run *run, bool expected)
{
    for (int w = 0; w < DEMO_WORKERS; w++) {
        if (!run->alive[w] && run->pid[w] <= 0)
            continue;
        int status;
        pid_t got = run->pid[w] > 0 ? waitpid(run->pid[w], &status, WNOHANG) : 0;
        if (got != run->pid[w])
            continue;
        run->pid[w] = 0;
        run->exit_status[w] = status;
        bool was_alive = run->alive[w];
        demo_walk_worker_died(run, w);
        if (expected && WIFEXITED(status) && WEXITSTATUS(status) == 0)
            continue;
        char how[96], why[256];
        snprintf(why, sizeof(why), "%s (%s, pid %d) %s%s", run->worker_name[w],
                 demo_component_name(run->cfg->worker_component[w]), (int)got,
                 demo_describe_exit(status, how, sizeof(how)),
                 run->hello[w] ? "" : " during startup (its error is on stderr)");
        if (was_alive && !expected) {
            run->died[w] = true;
            demo_run_fail(run, "%s", why);
            demo_walk_fail_all(run, why);
        } else if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            demo_run_fail(run, "%s at shutdown", why);
        }
    }
}

static void kill_workers(demo_run *run)
{
    for (int w = 0; w < DEMO_WORKERS; w++) {
        if (run->pid[w] <= 0)
            continue;
        kill(run->pid[w], SIGKILL);
        int status;
        while (waitpid(run->pid[w], &status, 0) < 0 && errno == EINTR)
            continue;
        run->pid[w] = 0;
        run->alive[w] = false;
    }
}

/* ---- the loop ------------------------------------------------------------------------------- */

typedef void (*role_fn)(demo_run *run, mstar_msg *m);

/* Read every waiting message of the three inboxes; true if there was any. */
static bool dispatch(demo_run *run)
{
    struct {
        demo_link *link;
        role_fn fn;
    } roles[] = {
        { &run->cond, demo_walk_on_conductor },
        { &run->api, demo_walk_on_api },
        { &run->pre, demo_walk_on_preprocess },
    };
    bool any = false;
    for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++) {
        mstar_msg m;
        while (mstar_mesh_recv(roles[i].link->mesh, 0, &m) == MSTAR_OK) {
            roles[i].fn(run, &m);
            mstar_msg_clear(&m);
            any = true;
        }
    }
    return any;
}

static void wait_a_little(demo_run *run, int timeout_ms)
{
    struct pollfd fds[4] = {
        { mstar_mesh_inbox_fd(run->cond.mesh), POLLIN, 0 },
        { mstar_mesh_inbox_fd(run->api.mesh), POLLIN, 0 },
        { mstar_mesh_inbox_fd(run->pre.mesh), POLLIN, 0 },
        { mstar_comm_event_fd(run->pre.comm), POLLIN, 0 },
    };
    poll(fds, fds[3].fd >= 0 ? 4 : 3, timeout_ms);
    if (fds[3].fd >= 0 && (fds[3].revents & POLLIN))
        mstar_comm_event_drain(run->pre.comm);
}

/* One turn of the loop: messages, periodic work, the workers. */
static void turn(demo_run *run, int timeout_ms)
{
    bool any = dispatch(run);
    demo_walk_poll(run);
    reap(run, false);
    if (!any)
        wait_a_little(run, timeout_ms);
}

static int signal_exit(demo_run *run)
{
    int sig = demo_signal_pending();
    if (sig != 0 && run->fatal[0] == '\0') {
        demo_run_fail(run, "interrupted by signal %d (%s)", sig, strsignal(sig));
        demo_walk_fail_all(run, run->fatal);
    }
    return sig;
}

static mstar_status wait_for_workers(demo_run *run)
{
    double until = demo_now() + STARTUP_TIMEOUT_S;
    while (!(run->hello[0] && run->hello[1])) {
        turn(run, 100);
        if (run->fatal[0] != '\0' || signal_exit(run) != 0)
            return mstar_error_set(MSTAR_ECANCELED, "startup: %s", run->fatal);
        if (demo_now() > until)
            return mstar_error_set(MSTAR_ETIMEDOUT,
                                   "startup: the workers did not report ready "
                                   "within %.0f s",
                                   STARTUP_TIMEOUT_S);
    }
    return MSTAR_OK;
}

static void maybe_kill_worker(demo_run *run)
{
    int w = run->opts->kill_worker;
    if (w < 0 || run->killed || !run->alive[w] || run->pid[w] <= 0 ||
        run->done < run->opts->kill_after)
        return;
    run->killed = true;
    fprintf(stderr,
            "mstar demo: fault injection: SIGKILL to %s (pid %d) after %d completed "
            "requests\n",
            run->worker_name[w], (int)run->pid[w], run->done);
    kill(run->pid[w], SIGKILL);
}

static void serve(demo_run *run)
{
    run->t_serve = demo_now();
    double deadline = run->t_serve + run->opts->timeout_s, give_up = 0.0;
    while (run->next_submit < run->cfg->requests || demo_walk_unfinished(run) > 0) {
        while (!run->stop_submitting && run->next_submit < run->cfg->requests &&
               run->inflight < run->cfg->concurrency)
            demo_walk_submit(run, run->next_submit);
        if (run->stop_submitting && demo_walk_unfinished(run) == 0)
            break;
        turn(run, 20);
        maybe_kill_worker(run);
        demo_report_progress(run, false);
        double now = demo_now();
        if (signal_exit(run) == 0 && now > deadline && run->fatal[0] == '\0') {
            demo_run_fail(run, "timed out after %.0f s with %d requests unfinished",
                          run->opts->timeout_s, demo_walk_unfinished(run));
            demo_walk_fail_all(run, run->fatal);
        }
        if (run->fatal[0] != '\0' && give_up == 0.0)
            give_up = now + DRAIN_GRACE_S;
        if (give_up > 0.0 && now > give_up) {
            demo_run_fail(run, "drains did not finish");
            break;
        }
        if (demo_signal_again())
            break;
    }
    run->t_end = demo_now();
    demo_report_progress(run, true);
}

/* Wait for the last acknowledgements, stop the workers and collect their reports. */
static void shut_down(demo_run *run)
{
    if (demo_signal_again()) {
        kill_workers(run);
        return;
    }
    double until = demo_now() + 3.0;
    while (mstar_comm_num_tensors(run->pre.comm) > 0 && demo_now() < until)
        turn(run, 20);
    for (int w = 0; w < DEMO_WORKERS; w++) {
        if (run->alive[w] && demo_send_simple(run->cond.mesh, run->worker_name[w],
                                              MSTAR_MSG_SHUTDOWN, NULL) != MSTAR_OK)
            demo_run_fail(run, "SHUTDOWN to %s: %s", run->worker_name[w], mstar_last_error());
    }
    until = demo_now() + SHUTDOWN_TIMEOUT_S;
    for (;;) {
        dispatch(run);
        reap(run, true);
        bool waiting = false;
        for (int w = 0; w < DEMO_WORKERS; w++)
            waiting |= run->pid[w] > 0;
        if (!waiting || demo_now() > until)
            break;
        wait_a_little(run, 20);
    }
    for (int w = 0; w < DEMO_WORKERS; w++) {
        if (run->pid[w] > 0)
            demo_run_fail(run, "%s did not exit within %.0f s of SHUTDOWN", run->worker_name[w],
                          SHUTDOWN_TIMEOUT_S);
    }
    kill_workers(run);
    mstar_arena_stats arena = { 0 };
    if (mstar_comm_transport(run->pre.comm) == MSTAR_TRANSPORT_ARENA &&
        mstar_comm_arena_stats(run->pre.comm, &arena) == MSTAR_OK) {
        run->pre_live_slots = (int64_t)arena.live_slots;
        run->pre_spill_files = (int64_t)arena.spill_files;
    }
    run->pre_tensors_left = (int64_t)mstar_comm_num_tensors(run->pre.comm);
}

/* ---- checks --------------------------------------------------------------------------------- */

/* ", first held: tensor 0x... (signal 's', request N)" when the worker named one. */
static void held_text(const demo_worker_report *rep, char *out, size_t size)
{
    out[0] = '\0';
    if (rep->held_signal[0] != '\0')
        snprintf(out, size, "; first held: tensor 0x%016llx (signal '%s', request %lld)",
                 (unsigned long long)rep->held_uuid, rep->held_signal,
                 (long long)rep->held_request);
}

static void check_leaks(demo_run *run)
{
    for (int w = 0; w < DEMO_WORKERS; w++) {
        const demo_worker_report *rep = &run->report[w];
        if (!rep->in) {
            if (run->exit_status[w] == 0 && run->fatal[0] == '\0')
                demo_run_fail(run, "%s sent no report", run->worker_name[w]);
            continue;
        }
        if (rep->tensors_held != 0 || rep->live_slots != 0 || rep->spill_files != 0 ||
            rep->open_requests != 0) {
            char held[160];
            held_text(rep, held, sizeof(held));
            demo_run_fail(run,
                          "leak: %s still holds %lld tensors, %lld arena slots, %lld spill files, "
                          "%lld open requests%s",
                          run->worker_name[w], (long long)rep->tensors_held,
                          (long long)rep->live_slots, (long long)rep->spill_files,
                          (long long)rep->open_requests, held);
        }
    }
    if (run->pre_tensors_left != 0 || run->pre_live_slots != 0 || run->pre_spill_files != 0)
        demo_run_fail(run, "leak: %s still holds %lld tensors, %lld arena slots, %lld spill files",
                      DEMO_PREPROCESS, (long long)run->pre_tensors_left,
                      (long long)run->pre_live_slots, (long long)run->pre_spill_files);
    int32_t accounted = run->done + run->aborted + run->failed;
    int32_t not_started = run->cfg->requests - run->next_submit;
    if (accounted + not_started != run->cfg->requests || demo_walk_unfinished(run) != 0)
        demo_run_fail(run, "%d of %d requests unaccounted for",
                      run->cfg->requests - accounted - not_started, run->cfg->requests);
    if (run->failed > 0 && run->fatal[0] == '\0') {
        for (int32_t i = 0; i < run->next_submit; i++) {
            if (run->reqs[i].state == R_FAILED) {
                demo_run_fail(run, "%d requests failed; request %d: %s", run->failed, i,
                              run->reqs[i].reason);
                break;
            }
        }
    }
}

/* ---- main ----------------------------------------------------------------------------------- */

static mstar_status open_links(demo_run *run)
{
    demo_link_options api = { DEMO_API_SERVER, run->dirs.ipc, NULL, run->opts->transport, NULL };
    demo_link_options cond = { DEMO_CONDUCTOR, run->dirs.ipc, NULL, run->opts->transport, NULL };
    demo_link_options pre = { DEMO_PREPROCESS, run->dirs.ipc, run->dirs.shm, run->opts->transport,
                              NULL };
    mstar_status st = demo_link_open(&api, &run->api);
    if (st == MSTAR_OK)
        st = demo_link_open(&cond, &run->cond);
    if (st == MSTAR_OK)
        st = demo_link_open(&pre, &run->pre);
    return st;
}

static void close_links(demo_run *run)
{
    demo_link_close(&run->pre);
    demo_link_close(&run->cond);
    demo_link_close(&run->api);
}

static mstar_status start(demo_run *run)
{
    mstar_status st = demo_dirs_create(&run->dirs, run->opts->shm_dir);
    if (st != MSTAR_OK)
        return st;
    for (int w = 0; w < DEMO_WORKERS; w++) {
        demo_worker_entity(w, run->worker_name[w]);
        if ((st = demo_spawn_worker(run->opts, w, &run->dirs, &run->pid[w])) != MSTAR_OK)
            return st;
        run->alive[w] = true;
    }
    fprintf(stderr,
            "mstar demo: driver pid %d; %s (%s) pid %d; %s (%s) pid %d; device %s; transport %s; "
            "graphs %s; shm %s; ipc %s\n",
            (int)getpid(), run->worker_name[0], demo_component_name(run->cfg->worker_component[0]),
            (int)run->pid[0], run->worker_name[1],
            demo_component_name(run->cfg->worker_component[1]), (int)run->pid[1],
            run->opts->device == MSTAR_DEVICE_CUDA ? "cuda" : "host",
            demo_transport_name(run->opts->transport), run->opts->graphs ? "on" : "off",
            run->dirs.shm, run->dirs.ipc);
    if ((st = demo_requests_generate(run->cfg, run->opts->abort_rate, &run->specs)) != MSTAR_OK)
        return st;
    if ((run->reqs = calloc((size_t)run->cfg->requests, sizeof(*run->reqs))) == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "%d requests", run->cfg->requests);
    if ((st = open_links(run)) != MSTAR_OK)
        return st;
    return wait_for_workers(run);
}

int demo_main(int argc, char **argv)
{
    demo_options opts;
    int rc = demo_options_parse(argc, argv, &opts);
    if (rc != 0)
        return rc == 1 ? 0 : rc;
    demo_run run;
    memset(&run, 0, sizeof(run));
    run.opts = &opts;
    run.cfg = &opts.cfg;
    run.enc_rank = demo_config_worker_of(run.cfg, DEMO_ENCODER);
    run.dec_rank = demo_config_worker_of(run.cfg, DEMO_DECODER);
    run.t_start = demo_now();
    mstar_log_set_entity("driver");
    demo_signals_install();
    mstar_status st = start(&run);
    if (st != MSTAR_OK) {
        demo_run_fail(&run, "%s", mstar_last_error());
    } else {
        serve(&run);
    }
    if (run.api.mesh != NULL && run.pre.comm != NULL)
        shut_down(&run);
    kill_workers(&run);
    close_links(&run);
    run.t_shutdown = demo_now();
    /* What a killed worker could not clean up is swept with the directory; anything else left
     * there is a leak. */
    run.shm_left = run.dirs.shm[0] != '\0' ? demo_dirs_count_shm(&run.dirs, NULL) : 0;
    for (int w = 0; w < DEMO_WORKERS; w++) {
        if (run.died[w] && run.shm_left > 0) {
            run.swept[w] = demo_dirs_count_shm(&run.dirs, run.worker_name[w]);
            run.shm_left -= run.swept[w];
        }
    }
    if (run.shm_left != 0)
        demo_run_fail(&run, "leak: %d files left in the shm directory %s", run.shm_left,
                      run.dirs.shm);
    if (st == MSTAR_OK) {
        check_leaks(&run);
        if (demo_signal_pending() == 0 && demo_check_eager(&run) != MSTAR_OK)
            demo_run_fail(&run, "self-check: %s", mstar_last_error());
    }
    run.t_checked = demo_now();
    demo_report_summary(&run);
    if (run.fatal[0] != '\0')
        fprintf(stderr, "mstar demo: FAILED: %s\n", run.fatal);
    demo_dirs_remove(&run.dirs);
    for (int32_t i = 0; run.reqs != NULL && i < run.cfg->requests; i++)
        free(run.reqs[i].result);
    free(run.reqs);
    demo_requests_free(run.specs, run.cfg->requests);
    int sig = demo_signal_pending();
    if (sig != 0)
        return 128 + sig;
    return run.fatal[0] == '\0' ? 0 : 1;
}

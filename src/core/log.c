/*
 * log.c — leveled logging with the entity name in every line.
 *
 * The level is read from MSTAR_LOG the first time anything logs (a bad value falls back to warn
 * and says so). A test or an embedder can swap the stderr sink for its own callback.
 */
#include "mstar/core.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define LOG_LINE_MAX 2048

static pthread_once_t level_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int current_level = MSTAR_LOG_WARN;
static char entity_name[MSTAR_NAME_MAX + 1];
static mstar_log_sink_fn sink_fn;
static void *sink_userdata;

static const char *const level_names[] = { "error", "warn", "info", "debug", "trace" };

const char *mstar_log_level_name(mstar_log_level level)
{
    if ((int)level < 0 || (int)level > MSTAR_LOG_TRACE)
        return "?";
    return level_names[level];
}

static void level_from_env(void)
{
    const char *v = getenv("MSTAR_LOG");
    if (v == NULL || v[0] == '\0')
        return;
    for (int i = 0; i <= MSTAR_LOG_TRACE; i++) {
        if (strcasecmp(v, level_names[i]) == 0) {
            current_level = i;
            return;
        }
    }
    fprintf(stderr,
            "mstar: MSTAR_LOG=%s is not one of error, warn, info, debug, trace; using warn\n", v);
}

mstar_log_level mstar_log_get_level(void)
{
    pthread_once(&level_once, level_from_env);
    return (mstar_log_level)__atomic_load_n(&current_level, __ATOMIC_RELAXED);
}

void mstar_log_set_level(mstar_log_level level)
{
    pthread_once(&level_once, level_from_env);
    __atomic_store_n(&current_level, (int)level, __ATOMIC_RELAXED);
}

bool mstar_log_enabled(mstar_log_level level)
{
    return (int)level <= (int)mstar_log_get_level();
}

void mstar_log_set_entity(const char *entity)
{
    pthread_mutex_lock(&log_lock);
    if (entity == NULL)
        entity = "";
    snprintf(entity_name, sizeof(entity_name), "%s", entity);
    pthread_mutex_unlock(&log_lock);
}

const char *mstar_log_get_entity(void)
{
    return entity_name;
}

void mstar_log_set_sink(mstar_log_sink_fn sink, void *userdata)
{
    pthread_mutex_lock(&log_lock);
    sink_fn = sink;
    sink_userdata = userdata;
    pthread_mutex_unlock(&log_lock);
}

void mstar_logv(mstar_log_level level, const char *fmt, va_list ap)
{
    if (!mstar_log_enabled(level))
        return;

    char line[LOG_LINE_MAX];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);

    pthread_mutex_lock(&log_lock);
    const char *who = entity_name[0] ? entity_name : "mstar";
    int n = snprintf(line, sizeof(line), "mstar %02d:%02d:%02d.%03d %-5s %s[%d]: ", tm.tm_hour,
                     tm.tm_min, tm.tm_sec, (int)(tv.tv_usec / 1000), level_names[level], who,
                     (int)getpid());
    if (n > 0 && (size_t)n < sizeof(line))
        vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    if (sink_fn != NULL)
        sink_fn(level, line, sink_userdata);
    else
        fprintf(stderr, "%s\n", line);
    pthread_mutex_unlock(&log_lock);
}

void mstar_log(mstar_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mstar_logv(level, fmt, ap);
    va_end(ap);
}

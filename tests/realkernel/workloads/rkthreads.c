/*
 * rkthreads - thread layouts for the thread-binding scenarios (test_threads_guest.py).
 *
 *   rkthreads latebind READY ESCAPED ESCAPED_MIB BOUND BOUND_MIB
 *   rkthreads cross    READY MIB
 *   rkthreads sleeper  READY MIB THREADS
 *   rkthreads sparse   READY MIB RESERVE_MIB
 *
 * latebind: creates ESCAPED threads while the process is unbound; each sets its own
 *     MPOL_BIND to node 1 (set_mempolicy is per thread; its CPU mask stays every CPU).
 *     Then the main thread alone binds itself to node 0: sched_setaffinity(0) (the calling
 *     thread only) to node 0's CPUs and set_mempolicy(MPOL_BIND, node 0), and creates BOUND
 *     threads, which inherit both. Every worker touches its own region of *_MIB, then all
 *     sleep. A late bind: the escaped threads keep the mask they had.
 * cross: two threads; thread 0 pins itself to node 0's CPUs with its task policy
 *     MPOL_BIND|MPOL_F_NUMA_BALANCING to node 1, thread 1 the reverse; each touches its own
 *     MIB region (placed on the other node) and keeps reading it every 50 ms. With that
 *     flag the region is scanned by NUMA balancing (the policy carries MPOL_F_MOF) and its
 *     hinting faults migrate nothing (the faulting CPU's node is outside the bind), so each
 *     thread's faults stay on the other node. Falls back to plain MPOL_BIND when the kernel
 *     refuses the flag (noted in READY as numa_balancing_flag=0).
 * sleeper: THREADS-1 workers that sleep; the main thread touches MIB, then everything sleeps
 *     (pause: no CPU at all). Start it under numactl/taskset to choose its CPUs.
 * sparse: maps RESERVE_MIB untouched and touches MIB of it, then sleeps; READY names the
 *     address of the untouched rest (addr=) for another process to write into.
 *
 * READY is written atomically once everything is touched: key=value lines (pid, tids,
 * numa_balancing_flag, addr). Then it sleeps until killed. Linux only; no libnuma.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MPOL_BIND 2
#define MPOL_F_NUMA_BALANCING (1 << 13)
#define PAGE 4096UL
#define MiB (1UL << 20)
#define MAXT 16

static void die(const char *what) {
    fprintf(stderr, "rkthreads: %s: %s\n", what, strerror(errno));
    exit(1);
}

static long gettid_(void) { return syscall(SYS_gettid); }

/* Fill *set with the CPUs of NUMA node `node` (sysfs cpulist). */
static void node_cpus(int node, cpu_set_t *set) {
    char path[128], buf[512];
    snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", node);
    FILE *f = fopen(path, "r");
    if (!f) die(path);
    if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
    fclose(f);
    CPU_ZERO(set);
    char *p = buf;
    while (*p && *p != '\n') {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p) break;
        if (*end == '-') b = strtol(end + 1, &end, 10);
        for (long c = a; c <= b; c++) CPU_SET((int)c, set);
        p = (*end == ',') ? end + 1 : end;
    }
}

static void pin_self(int node) {
    cpu_set_t set;
    node_cpus(node, &set);
    if (sched_setaffinity(0, sizeof set, &set)) die("sched_setaffinity");
}

/* Set the calling thread's policy to MPOL_BIND on `node` (with `flags`); 0 or -errno. */
static int bind_self(int node, int flags) {
    unsigned long mask = 1UL << node;
    if (syscall(SYS_set_mempolicy, MPOL_BIND | flags, &mask, sizeof mask * 8 + 1))
        return -errno;
    return 0;
}

static char *touch(size_t bytes) {
    char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) die("mmap");
    madvise(p, bytes, MADV_NOHUGEPAGE);
    for (size_t o = 0; o < bytes; o += PAGE) p[o] = 1;
    return p;
}

static long tids[MAXT];
static int ntids;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int touched, go;
static int balancing_flag = 1;

static void done_touching(void) {
    pthread_mutex_lock(&lock);
    touched++;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
}

static void wait_touched(int n) {
    pthread_mutex_lock(&lock);
    while (touched < n) pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
}

static void sleep_forever(void) {
    for (;;) pause();
}

struct job { int idx; size_t bytes; int node; };

static void *escaped(void *arg) {
    struct job *j = arg;
    tids[j->idx] = gettid_();
    pthread_mutex_lock(&lock);
    while (!go) pthread_cond_wait(&cond, &lock);  /* until the main thread has bound itself */
    pthread_mutex_unlock(&lock);
    if (bind_self(1, 0)) die("set_mempolicy node 1");
    touch(j->bytes);
    done_touching();
    sleep_forever();
    return NULL;
}

static void *bound(void *arg) {
    struct job *j = arg;
    tids[j->idx] = gettid_();
    /* created after the bind: inherits node 0's CPUs and MPOL_BIND node 0; pinned again
     * here all the same (one 6.12 run showed these threads with every CPU) */
    pin_self(0);
    touch(j->bytes);
    done_touching();
    sleep_forever();
    return NULL;
}

static void *crosser(void *arg) {
    struct job *j = arg;  /* node: where this thread runs; the memory is on the other */
    tids[j->idx] = gettid_();
    pin_self(j->node);
    int err = bind_self(1 - j->node, MPOL_F_NUMA_BALANCING);
    if (err == -EINVAL) {
        balancing_flag = 0;
        err = bind_self(1 - j->node, 0);
    }
    if (err) { errno = -err; die("set_mempolicy"); }
    volatile char *p = touch(j->bytes);
    done_touching();
    unsigned long sum = 0;
    struct timespec nap = {0, 50 * 1000 * 1000};
    for (;;) {
        for (size_t o = 0; o < j->bytes; o += PAGE) sum += p[o];
        nanosleep(&nap, NULL);
    }
    return (void *)sum;
}

static void *sleeper(void *arg) {
    struct job *j = arg;
    tids[j->idx] = gettid_();
    done_touching();
    sleep_forever();
    return NULL;
}

static void ready(const char *path, const char *extra) {
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) die(tmp);
    fprintf(f, "pid=%d\nnuma_balancing_flag=%d\ntids=", getpid(), balancing_flag);
    for (int i = 0; i < ntids; i++) fprintf(f, "%s%ld", i ? "," : "", tids[i]);
    fprintf(f, "\n%s", extra);
    fclose(f);
    if (rename(tmp, path)) die("rename");
}

static void spawn(void *(*fn)(void *), struct job *j) {
    pthread_t t;
    if (pthread_create(&t, NULL, fn, j)) die("pthread_create");
    ntids++;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: rkthreads MODE READY ARGS...\n");
        return 2;
    }
    const char *mode = argv[1], *path = argv[2];
    static struct job jobs[MAXT];
    tids[0] = gettid_();
    ntids = 1;
    char extra[128] = "";
    if (!strcmp(mode, "latebind") && argc == 7) {
        int ne = atoi(argv[3]), nb = atoi(argv[5]);
        if (ne + nb + 1 > MAXT) return 2;
        for (int i = 0; i < ne; i++) {
            jobs[ntids] = (struct job){ntids, (size_t)atol(argv[4]) * MiB, 1};
            spawn(escaped, &jobs[ntids]);
        }
        pin_self(0);  /* the late bind: this thread only */
        if (bind_self(0, 0)) die("set_mempolicy node 0");
        pthread_mutex_lock(&lock);
        go = 1;
        pthread_cond_broadcast(&cond);
        pthread_mutex_unlock(&lock);
        for (int i = 0; i < nb; i++) {
            jobs[ntids] = (struct job){ntids, (size_t)atol(argv[6]) * MiB, 0};
            spawn(bound, &jobs[ntids]);
        }
        wait_touched(ne + nb);
    } else if (!strcmp(mode, "cross") && argc == 4) {
        for (int node = 0; node < 2; node++) {
            jobs[ntids] = (struct job){ntids, (size_t)atol(argv[3]) * MiB, node};
            spawn(crosser, &jobs[ntids]);
        }
        wait_touched(2);
    } else if (!strcmp(mode, "sleeper") && argc == 5) {
        int n = atoi(argv[4]);
        if (n < 1 || n > MAXT) return 2;
        touch((size_t)atol(argv[3]) * MiB);
        for (int i = 1; i < n; i++) {
            jobs[ntids] = (struct job){ntids, 0, 0};
            spawn(sleeper, &jobs[ntids]);
        }
        wait_touched(n - 1);
    } else if (!strcmp(mode, "sparse") && argc == 5) {
        size_t used = (size_t)atol(argv[3]) * MiB, all = (size_t)atol(argv[4]) * MiB;
        char *p = mmap(NULL, all, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) die("mmap");
        madvise(p, all, MADV_NOHUGEPAGE);
        for (size_t o = 0; o < used; o += PAGE) p[o] = 1;
        snprintf(extra, sizeof extra, "addr=%lu\nfree_bytes=%zu\n",
                 (unsigned long)(p + used), all - used);
    } else {
        fprintf(stderr, "rkthreads: bad arguments for %s\n", mode);
        return 2;
    }
    ready(path, extra);
    sleep_forever();
    return 0;
}

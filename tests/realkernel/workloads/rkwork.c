/*
 * rkwork - a workload with a known NUMA placement, for the real-kernel test bed.
 *
 *   rkwork -r READYFILE [-s MiB] [-m MODE] [-c NODE] [-T SECONDS] [-n COMM]
 *
 * Modes (placement policy comes from numactl around it unless stated):
 *   anon     private anonymous memory, touched page by page (THP disabled for it)
 *   thp      private anonymous memory, 2 MiB aligned, madvise(MADV_HUGEPAGE)
 *   hugetlb  MAP_HUGETLB 2 MiB pages (reserve them on the wanted node first)
 *   pool     parent touches a MAP_SHARED|MAP_ANONYMOUS pool, then forks a child that resets
 *            its memory policy, pins itself to node NODE (-c) and touches the whole pool
 *   split    two threads, thread i pinned to node i with MPOL_BIND to node i, each touching
 *            SIZE/2 of its own memory; the main thread pins to node 0
 *   migrate  touches its memory where it runs, waits for SIGUSR1, then pins itself to node
 *            NODE (-c), writes READYFILE.moved and keeps touching the memory every 100 ms
 *
 * When the memory is touched it writes READYFILE atomically (key=value lines: pid, child,
 * tids, mode, size_bytes, touch_s, cpu) and sleeps until SECONDS (-T, default 600) have
 * passed or it is killed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef MAP_HUGETLB
#define MAP_HUGETLB 0x40000
#endif
#define MPOL_DEFAULT 0
#define MPOL_BIND 2
#define PAGE 4096UL
#define HUGE (2UL << 20)

static const char *ready_path;
static double t_start;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what) {
    fprintf(stderr, "rkwork: %s: %s\n", what, strerror(errno));
    exit(1);
}

static long gettid_(void) { return syscall(SYS_gettid); }

/* Fill *set with the CPUs of NUMA node `node` (from sysfs cpulist); return the count. */
static int node_cpus(int node, cpu_set_t *set) {
    char path[128], buf[512];
    snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", node);
    FILE *f = fopen(path, "r");
    if (!f) die(path);
    if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
    fclose(f);
    CPU_ZERO(set);
    int n = 0;
    char *p = buf;
    while (*p && *p != '\n') {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p) break;
        if (*end == '-') b = strtol(end + 1, &end, 10);
        for (long c = a; c <= b; c++) { CPU_SET((int)c, set); n++; }
        p = (*end == ',') ? end + 1 : end;
    }
    return n;
}

static void pin_to_node(int node) {
    cpu_set_t set;
    if (node_cpus(node, &set) == 0) { fprintf(stderr, "rkwork: node %d has no cpus\n", node); exit(1); }
    if (sched_setaffinity(0, sizeof set, &set) != 0) die("sched_setaffinity");
    sched_yield();
}

static void set_policy(int mode, int node) {
    unsigned long mask[2] = {0, 0};
    if (node >= 0) mask[0] = 1UL << node;
    if (syscall(SYS_set_mempolicy, mode, node >= 0 ? mask : NULL, node >= 0 ? 65 : 0) != 0)
        die("set_mempolicy");
}

static void touch(char *p, size_t len, unsigned char v) {
    for (size_t off = 0; off < len; off += PAGE) p[off] = (char)(v + off / PAGE);
}

static char *map_anon(size_t len, int extra_flags) {
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | extra_flags,
                   -1, 0);
    if (p == MAP_FAILED) die("mmap");
    return p;
}

static void write_ready(const char *suffix, long child, const char *tids, const char *mode,
                        size_t size, double touch_s) {
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s%s", ready_path, suffix);
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) die(tmp);
    fprintf(f, "pid=%ld\nchild=%ld\ntids=%s\nmode=%s\nsize_bytes=%zu\ntouch_s=%.3f\ncpu=%d\n",
            (long)getpid(), child, tids, mode, size, touch_s, sched_getcpu());
    fclose(f);
    if (rename(tmp, path) != 0) die("rename");
    printf("READY%s pid=%ld child=%ld mode=%s touch_s=%.3f cpu=%d\n", suffix, (long)getpid(),
           child, mode, touch_s, sched_getcpu());
    fflush(stdout);
}

static void sleep_until(double end) {
    while (now() < end) sleep(1);
}

/* --- split --------------------------------------------------------------------------- */
struct split_arg { int node; size_t len; long tid; pthread_barrier_t *bar; };

static void *split_thread(void *v) {
    struct split_arg *a = v;
    a->tid = gettid_();
    pin_to_node(a->node);
    set_policy(MPOL_BIND, a->node);
    char *p = map_anon(a->len, 0);
    madvise(p, a->len, MADV_NOHUGEPAGE);
    touch(p, a->len, 1);
    pthread_barrier_wait(a->bar);
    for (;;) pause();
    return NULL;
}

int main(int argc, char **argv) {
    size_t mib = 128;
    const char *mode = "anon", *comm = NULL;
    int node = 0;
    double lifetime = 600;
    int opt;
    while ((opt = getopt(argc, argv, "s:m:r:c:T:n:")) != -1) {
        switch (opt) {
        case 's': mib = strtoul(optarg, NULL, 10); break;
        case 'm': mode = optarg; break;
        case 'r': ready_path = optarg; break;
        case 'c': node = atoi(optarg); break;
        case 'T': lifetime = atof(optarg); break;
        case 'n': comm = optarg; break;
        default:
            fprintf(stderr, "usage: rkwork -r READY [-s MiB] [-m MODE] [-c NODE] [-T S] [-n COMM]\n");
            return 2;
        }
    }
    if (!ready_path) { fprintf(stderr, "rkwork: -r READYFILE is required\n"); return 2; }
    if (comm) prctl(PR_SET_NAME, comm, 0, 0, 0);
    t_start = now();
    double end = t_start + lifetime;
    size_t len = mib << 20;
    char tids[256];
    snprintf(tids, sizeof tids, "%ld", (long)getpid());

    if (!strcmp(mode, "anon")) {
        char *p = map_anon(len, 0);
        madvise(p, len, MADV_NOHUGEPAGE);
        touch(p, len, 1);
        write_ready("", 0, tids, mode, len, now() - t_start);
    } else if (!strcmp(mode, "thp")) {
        char *raw = map_anon(len + HUGE, 0);
        char *p = (char *)(((unsigned long)raw + HUGE - 1) & ~(HUGE - 1));
        if (madvise(p, len, MADV_HUGEPAGE) != 0) die("madvise(MADV_HUGEPAGE)");
        touch(p, len, 1);
        write_ready("", 0, tids, mode, len, now() - t_start);
    } else if (!strcmp(mode, "hugetlb")) {
        char *p = map_anon(len, MAP_HUGETLB);
        for (size_t off = 0; off < len; off += HUGE) p[off] = 1;
        write_ready("", 0, tids, mode, len, now() - t_start);
    } else if (!strcmp(mode, "pool")) {
        char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) die("mmap shared");
        touch(p, len, 1);
        int pfd[2];
        if (pipe(pfd) != 0) die("pipe");
        pid_t child = fork();
        if (child < 0) die("fork");
        if (child == 0) {
            close(pfd[0]);
            prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
            prctl(PR_SET_NAME, "rkwork-child", 0, 0, 0);
            set_policy(MPOL_DEFAULT, -1);
            pin_to_node(node);
            volatile unsigned long sum = 0;
            for (size_t off = 0; off < len; off += PAGE) { sum += (unsigned char)p[off]; p[off]++; }
            (void)sum;
            if (write(pfd[1], "k", 1) != 1) die("write pipe");
            close(pfd[1]);
            sleep_until(end);
            _exit(0);
        }
        close(pfd[1]);
        char c;
        if (read(pfd[0], &c, 1) != 1) { fprintf(stderr, "rkwork: pool child failed\n"); return 1; }
        snprintf(tids, sizeof tids, "%ld", (long)getpid());
        write_ready("", (long)child, tids, mode, len, now() - t_start);
        sleep_until(end);
        kill(child, SIGTERM);
        waitpid(child, NULL, 0);
        return 0;
    } else if (!strcmp(mode, "split")) {
        pin_to_node(0);
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, 3);
        struct split_arg a[2] = {{0, len / 2, 0, &bar}, {1, len / 2, 0, &bar}};
        pthread_t th[2];
        for (int i = 0; i < 2; i++)
            if (pthread_create(&th[i], NULL, split_thread, &a[i]) != 0) die("pthread_create");
        pthread_barrier_wait(&bar);
        snprintf(tids, sizeof tids, "%ld,%ld,%ld", (long)getpid(), a[0].tid, a[1].tid);
        write_ready("", 0, tids, mode, len, now() - t_start);
    } else if (!strcmp(mode, "migrate")) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGUSR1);
        sigprocmask(SIG_BLOCK, &set, NULL);
        char *p = map_anon(len, 0);
        madvise(p, len, MADV_NOHUGEPAGE);
        touch(p, len, 1);
        write_ready("", 0, tids, mode, len, now() - t_start);
        int sig;
        struct timespec ts = {0, 0};
        siginfo_t info;
        for (;;) {
            double left = end - now();
            if (left <= 0) return 0;
            ts.tv_sec = left > 1 ? 1 : 0;
            ts.tv_nsec = left > 1 ? 0 : (long)(left * 1e9);
            sig = sigtimedwait(&set, &info, &ts);
            if (sig == SIGUSR1) break;
        }
        pin_to_node(node);
        write_ready(".moved", 0, tids, mode, len, now() - t_start);
        unsigned char v = 2;
        struct timespec nap = {0, 100 * 1000 * 1000};
        while (now() < end) {
            touch(p, len, v++);
            nanosleep(&nap, NULL);
        }
        return 0;
    } else {
        fprintf(stderr, "rkwork: unknown mode %s\n", mode);
        return 2;
    }
    sleep_until(end);
    return 0;
}

/* hotcold: a hot set and a cold set on chosen nodes, for the DAMON hot-memory test.
 *
 *   hotcold HOT_MIB HOT_NODE COLD_MIB COLD_NODE CPU READY_FILE
 *
 * Runs on CPU, faults COLD_MIB bound to COLD_NODE (touched once, never again) and HOT_MIB
 * bound to HOT_NODE, writes "pid=N" to READY_FILE, then reads one byte of every page of the
 * hot set in a loop forever (HOT_MIB 0: no hot set, it sleeps; COLD_MIB 0: no cold set).
 * A forked companion on the same CPU wakes every 1 ms: under QEMU's TCG a loop that stays
 * inside the software TLB never walks the page tables again, so the Accessed bits DAMON
 * clears are never set and the hot set reads cold (measured: 2 of 30 runs); the forced
 * context switches flush that TLB (0 of 35). Linux only; no libnuma.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MPOL_BIND 2

static void die(const char *what) { perror(what); exit(1); }

static char *bound(size_t bytes, int node) {
    char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned long mask[16] = {0};
    if (p == MAP_FAILED) die("mmap");
    mask[node / 64] = 1UL << (node % 64);
    if (syscall(SYS_mbind, p, bytes, MPOL_BIND, mask, 1024, 0) != 0) die("mbind");
    madvise(p, bytes, MADV_NOHUGEPAGE);  /* 4 KiB pages: one region per mapping, no THP */
    memset(p, 1, bytes);
    return p;
}

int main(int argc, char **argv) {
    if (argc != 7) { fprintf(stderr, "usage: hotcold HOT_MIB HOT_NODE COLD_MIB COLD_NODE CPU READY\n"); return 2; }
    size_t hot = (size_t)atoi(argv[1]) << 20, cold = (size_t)atoi(argv[3]) << 20;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(atoi(argv[5]), &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) die("sched_setaffinity");
    pid_t child = fork();
    if (child == 0) {  /* the companion: wakes every 1 ms on the same CPU */
        struct timespec ms = {0, 1000000};
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        prctl(PR_SET_NAME, "hotcold-tick");
        for (;;) nanosleep(&ms, NULL);
    }
    if (cold) bound(cold, atoi(argv[4]));
    volatile char *h = hot ? bound(hot, atoi(argv[2])) : NULL;
    FILE *f = fopen(argv[6], "w");
    if (!f) die("ready");
    fprintf(f, "pid=%d\n", getpid());
    fclose(f);
    unsigned long sum = 0;
    while (!hot) pause();
    for (;;)
        for (size_t i = 0; i < hot; i += 4096) sum += h[i];
    return (int)sum;
}

/* Distinct stacks for bench/pictures.sh.
 *
 * Calls down ten functions c0..c9 four levels deep, one path for each number 0..9999 (its digits pick the
 * functions), REPEAT times (default 10), firing sdtbench:leaf at the
 * bottom: 10,000 distinct user stacks. Then it prints the wall-clock time
 * in nanoseconds on stderr, fires sdtbench:done, and waits to be killed,
 * so that the tracer (whose exit() at sdtbench:done ends the run) still
 * reads its symbols from a live process, as bpftrace 0.17 needs.
 *
 *     sdtbench: done_ns=1732...
 *
 * Built at -O0 with frame pointers: every call is a frame.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <time.h>
#include <unistd.h>

static volatile int sink;

static void dispatch(int depth, int code);

#define STEP(n)                                  \
    static void c##n(int depth, int code) {      \
        dispatch(depth + 1, code);               \
        sink++;                                  \
    }
STEP(0) STEP(1) STEP(2) STEP(3) STEP(4) STEP(5) STEP(6) STEP(7) STEP(8) STEP(9)

static void (*const steps[10])(int, int) = {c0, c1, c2, c3, c4, c5, c6, c7, c8, c9};

static void dispatch(int depth, int code) {
    if (depth == 4) {
        DTRACE_PROBE1(sdtbench, leaf, code);
        return;
    }
    int digit = code;
    for (int i = 0; i < depth; i++)
        digit /= 10;
    steps[digit % 10](depth, code);
}

int main(int argc, char **argv) {
    long repeat = argc > 1 ? atol(argv[1]) : 10;
    if (argc > 2) /* seconds to wait for a tracer that attaches with -p */
        sleep((unsigned)atoi(argv[2]));
    for (long r = 0; r < repeat; r++)
        for (int code = 0; code < 10000; code++)
            dispatch(0, code);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    fprintf(stderr, "sdtbench: done_ns=%lld\n", (long long)now.tv_sec * 1000000000LL + now.tv_nsec);
    DTRACE_PROBE(sdtbench, done);
    for (;;)
        pause();
}

/* The C side of bench/probe.sh: the same loop as src/main.rs with a
 * <sys/sdt.h> probe, gated by its semaphore the way `dtrace -h` headers
 * gate probes (BENCH_HIT_ENABLED()), so that a disabled probe skips its
 * argument.
 *
 * bench-c IMPL ARG N [--wait]: IMPL is none or sdt, ARG expensive or cheap.
 * Prints nanoseconds per iteration: wall-clock, then the thread's CPU time. */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

__extension__ unsigned short bench_hit_semaphore __attribute__((section(".probes")));
#define BENCH_HIT_ENABLED() __builtin_expect(bench_hit_semaphore, 0)

__attribute__((noinline)) static uint64_t expensive(uint64_t seed) {
	uint64_t acc = seed;
	for (uint64_t i = 0; i < 100; i++)
		acc = acc * 6364136223846793005ULL + i;
	return acc;
}

static double now_ns(clockid_t clock) {
	struct timespec ts;
	clock_gettime(clock, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* Keeps the loop counter alive, as Rust's black_box does. */
#define BLACK_BOX(x) __asm__ volatile("" : : "r"(x) : "memory")

int main(int argc, char **argv) {
	if (argc < 4) {
		fprintf(stderr, "usage: bench-c none|sdt expensive|cheap N [--wait]\n");
		return 2;
	}
	int probe = strcmp(argv[1], "sdt") == 0;
	int expensive_arg = strcmp(argv[2], "expensive") == 0;
	uint64_t n = strtoull(argv[3], NULL, 10);
	if (argc > 4 && strcmp(argv[4], "--wait") == 0) {
		for (int i = 0; !bench_hit_semaphore; i++) {
			if (i == 6000) {
				fprintf(stderr, "no tracer within a minute\n");
				return 1;
			}
			usleep(10000);
		}
		usleep(500000);
	}
	double start = now_ns(CLOCK_MONOTONIC), cpu = now_ns(CLOCK_THREAD_CPUTIME_ID);
	if (!probe) {
		for (uint64_t i = 0; i < n; i++)
			BLACK_BOX(i);
	} else if (expensive_arg) {
		for (uint64_t i = 0; i < n; i++) {
			BLACK_BOX(i);
			if (BENCH_HIT_ENABLED())
				STAP_PROBE1(bench, hit, expensive(i));
		}
	} else {
		for (uint64_t i = 0; i < n; i++) {
			BLACK_BOX(i);
			if (BENCH_HIT_ENABLED())
				STAP_PROBE1(bench, hit, i);
		}
	}
	printf("%.3f %.3f\n", (now_ns(CLOCK_MONOTONIC) - start) / n,
	       (now_ns(CLOCK_THREAD_CPUTIME_ID) - cpu) / n);
	return 0;
}

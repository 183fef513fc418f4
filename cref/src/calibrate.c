/* calibrate.c - C helper for `ipcbench calibrate` (seed 001's rdtscp and cgt):
 * TSC ticks per nanosecond over a timed interval, the cost of one rdtscp,
 * and the cost of clock_gettime(CLOCK_MONOTONIC) from C for comparison with
 * Go's time.Now.
 *
 * usage: calibrate INTERVAL_MS
 * Prints one JSON object on stdout. x86-64 only (rdtscp).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

static int64_t now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv) {
	long ms = argc > 1 ? atol(argv[1]) : 100;
	unsigned aux;
	/* ticks per ns: read both clocks, busy-wait the interval, read again */
	int64_t n0 = now();
	uint64_t t0 = __rdtscp(&aux);
	while (now() - n0 < ms * 1000000LL) {
	}
	uint64_t t1 = __rdtscp(&aux);
	int64_t n1 = now();
	double per_ns = (double)(t1 - t0) / (double)(n1 - n0);

	enum { N = 1000000 };
	volatile uint64_t sink = 0;
	int64_t a = now();
	for (int i = 0; i < N; i++) sink += __rdtscp(&aux);
	double rdtscp_ns = (double)(now() - a) / N;

	a = now();
	for (int i = 0; i < N; i++) sink += (uint64_t)now();
	double cgt_ns = (double)(now() - a) / N;
	(void)sink;
	printf("{\"interval_ns\":%lld,\"tsc_ticks\":%llu,\"tsc_per_ns\":%.6f,\"rdtscp_ns\":%.2f,\"clock_gettime_ns\":%.2f}\n",
	       (long long)(n1 - n0), (unsigned long long)(t1 - t0), per_ns, rdtscp_ns, cgt_ns);
	return 0;
}

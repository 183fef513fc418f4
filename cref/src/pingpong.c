/* pingpong.c - C reference for `ipcbench rtt`: round trip of one payload
 * each way between a parent and a forked child, over two pipes ("pipe") or
 * a unix stream socketpair ("unixsock"). The parent times every iteration
 * with CLOCK_MONOTONIC; the child echoes. Same payload, iteration count and
 * pinning as the Go side so the two can be compared in one run.
 *
 * usage: pingpong MECH SIZE ITERATIONS WARMUP PIN CPU_A CPU_B FIFO RAWFILE
 *   MECH pipe|unixsock; PIN same|cross|none (same: both on CPU_A, cross:
 *   parent CPU_A, child CPU_B); FIFO > 0 tries SCHED_FIFO at that priority
 *   (0: SCHED_OTHER);
 *   RAWFILE receives ITERATIONS int64 samples in ns ("-" for none).
 * Prints one JSON object with summary statistics on stdout.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int pin(const char *mode, int cpu) {
	if (strcmp(mode, "none") == 0) return 0;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof set, &set);
}

static const char *fifo(int priority) {
	if (priority <= 0) return "off";
	struct sched_param sp = {.sched_priority = priority};
	if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) return strerror(errno);
	return "ok";
}

static int full(int fd, char *buf, size_t n, int wr) {
	size_t done = 0;
	while (done < n) {
		ssize_t r = wr ? write(fd, buf + done, n - done) : read(fd, buf + done, n - done);
		if (r <= 0) {
			if (r < 0 && errno == EINTR) continue;
			return -1;
		}
		done += (size_t)r;
	}
	return 0;
}

static int cmp(const void *a, const void *b) {
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static int64_t rank(int64_t *s, long n, double q) {
	long r = (long)(q * n + 0.999999999);
	if (r < 1) r = 1;
	if (r > n) r = n;
	return s[r - 1];
}

int main(int argc, char **argv) {
	if (argc != 10) {
		fprintf(stderr, "usage: pingpong MECH SIZE ITERATIONS WARMUP PIN CPU_A CPU_B FIFO RAWFILE\n");
		return 2;
	}
	const char *mech = argv[1], *pinmode = argv[5], *raw = argv[9];
	size_t size = strtoul(argv[2], 0, 10);
	long iters = strtol(argv[3], 0, 10), warm = strtol(argv[4], 0, 10);
	int cpua = atoi(argv[6]), cpub = atoi(argv[7]), wantfifo = atoi(argv[8]);
	if (size < 1) size = 1;
	int p2c[2], c2p[2], status[2];
	if (strcmp(mech, "pipe") == 0) {
		if (pipe(p2c) || pipe(c2p)) { perror("pipe"); return 1; }
	} else if (strcmp(mech, "unixsock") == 0) {
		int sv[2];
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) { perror("socketpair"); return 1; }
		/* parent writes p2c[1], reads c2p[0]; child reads p2c[0], writes c2p[1] */
		p2c[1] = c2p[0] = sv[0];
		p2c[0] = c2p[1] = sv[1];
	} else {
		fprintf(stderr, "unknown mech %s\n", mech);
		return 2;
	}
	if (pipe(status)) { perror("pipe"); return 1; }
	char *buf = calloc(1, size);
	long total = iters + warm;
	pid_t pid = fork();
	if (pid < 0) { perror("fork"); return 1; }
	if (pid == 0) {
		close(status[0]);
		pin(pinmode, strcmp(pinmode, "cross") == 0 ? cpub : cpua);
		fifo(wantfifo);
		struct rusage r0, r1;
		for (long i = 0; i < total; i++) {
			if (i == warm) getrusage(RUSAGE_THREAD, &r0);
			if (full(p2c[0], buf, size, 0) || full(c2p[1], buf, size, 1)) _exit(1);
		}
		getrusage(RUSAGE_THREAD, &r1);
		if (warm >= total) r0 = r1;
		long st[3] = {sched_getcpu(), r1.ru_nvcsw - r0.ru_nvcsw, r1.ru_nivcsw - r0.ru_nivcsw};
		if (write(status[1], st, sizeof st) != sizeof st) _exit(1);
		_exit(0);
	}
	close(status[1]);
	if (strcmp(mech, "pipe") == 0) { close(p2c[0]); close(c2p[1]); }
	int pinerr = pin(pinmode, cpua);
	const char *fifomsg = fifo(wantfifo);
	int64_t *s = malloc(sizeof(int64_t) * (iters > 0 ? iters : 1));
	struct timespec a, b;
	struct rusage r0, r1;
	int cpu0 = -1;
	for (long i = 0; i < total; i++) {
		if (i == warm) { getrusage(RUSAGE_THREAD, &r0); cpu0 = sched_getcpu(); }
		clock_gettime(CLOCK_MONOTONIC, &a);
		if (full(p2c[1], buf, size, 1) || full(c2p[0], buf, size, 0)) { perror("pingpong io"); return 1; }
		clock_gettime(CLOCK_MONOTONIC, &b);
		if (i >= warm) s[i - warm] = (int64_t)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec);
	}
	getrusage(RUSAGE_THREAD, &r1);
	int cpu1 = sched_getcpu();
	long st[3] = {-1, 0, 0};
	if (read(status[0], st, sizeof st) != sizeof st) fprintf(stderr, "pingpong: no child status\n");
	int ws;
	waitpid(pid, &ws, 0);
	if (raw[0] && strcmp(raw, "-") != 0) {
		FILE *f = fopen(raw, "wb");
		if (!f || fwrite(s, sizeof(int64_t), iters, f) != (size_t)iters || fclose(f)) { perror(raw); return 1; }
	}
	double sum = 0;
	for (long i = 0; i < iters; i++) sum += s[i];
	qsort(s, iters, sizeof s[0], cmp);
	printf("{\"mech\":\"%s\",\"size\":%zu,\"iterations\":%ld,\"pin_error\":%d,\"sched_fifo\":\"%s\","
	       "\"parent_cpu_start\":%d,\"parent_cpu_end\":%d,\"child_cpu\":%ld,"
	       "\"parent_vol_cs\":%ld,\"parent_invol_cs\":%ld,\"child_vol_cs\":%ld,\"child_invol_cs\":%ld,"
	       "\"mean_ns\":%.1f,\"median_ns\":%lld,\"min_ns\":%lld,\"max_ns\":%lld,\"q99_ns\":%lld}\n",
	       mech, size, iters, pinerr, fifomsg, cpu0, cpu1, st[0],
	       r1.ru_nvcsw - r0.ru_nvcsw, r1.ru_nivcsw - r0.ru_nivcsw, st[1], st[2],
	       iters ? sum / iters : 0.0, (long long)rank(s, iters, 0.5), (long long)s[0],
	       (long long)s[iters - 1], (long long)rank(s, iters, 0.99));
	return WIFEXITED(ws) && WEXITSTATUS(ws) == 0 ? 0 : 1;
}

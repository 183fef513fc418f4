/* csyslog: sends its argument with glibc's syslog(3), for the corpus
 * capture (capture.py). glibc always writes to /dev/log; capture.py runs
 * this in a private mount namespace where /dev/log leads to its socket. */
#include <syslog.h>

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	openlog("capp", LOG_PID, LOG_LOCAL0);
	syslog(LOG_WARNING, "%s", argv[1]);
	closelog();
	return 0;
}

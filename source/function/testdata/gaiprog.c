/* The C program of TestDebianLibc: calls glibc's getaddrinfo n times for
 * each of three numeric hosts, the third not an address (EAI_NONAME).
 * AI_NUMERICHOST: no name service is asked. */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static const char *const hosts[] = {"127.0.0.1", "::1", "not-an-address"};

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 3;
	char line[16];
	long failed = 0;
	struct addrinfo hints, *res;

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = AI_NUMERICHOST;
	hints.ai_family = AF_UNSPEC;
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	for (long i = 0; i < n; i++) {
		if (getaddrinfo(hosts[i % 3], NULL, &hints, &res) != 0) {
			failed++;
			continue;
		}
		freeaddrinfo(res);
	}
	printf("done %ld\n", failed);
	fflush(stdout);
	return 0;
}

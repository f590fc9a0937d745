// cgmove does N start/done pairs per line "N" read from stdin, then prints
// "ok", so TestUSDTCgroupMove can move it between cgroups between rounds.
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

int main(void)
{
	char line[64];
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");
	while (fgets(line, sizeof(line), stdin)) {
		int n = atoi(line);
		for (int i = 0; i < n; i++) {
			STAP_PROBE(cg, start);
			STAP_PROBE(cg, done);
		}
		printf("ok\n");
	}
	return 0;
}

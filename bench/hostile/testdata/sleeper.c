/* A program that only runs: what the /proc scan parses. */
#include <stdio.h>
#include <unistd.h>

int main(void)
{
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}

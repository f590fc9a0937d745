// SPDX-License-Identifier: (Apache-2.0 OR BSD-2-Clause)
/*
 * A program that emits through a shared libspanwatch (linked with
 * libspanwatch.so beside it), for TestCMarkerScanFindsLibrary: the /proc
 * scan must find the library in its maps, not a marker in the program.
 *
 *   cmarker-lib NAME   prints "ready mode=M", then one span of 2 ms for
 *                      each line on stdin (an error when the line starts
 *                      with 'e'), answering "listening=L" to each
 */
#include <stdio.h>
#include <string.h>

#include "libspanwatch.h"

int main(int argc, char **argv)
{
	char line[64];

	if (argc != 2)
		return 2;
	printf("ready mode=%d\n", spanwatch_lib_mode());
	fflush(stdout);
	while (fgets(line, sizeof line, stdin)) {
		spanwatch_lib_record(argv[1], strlen(argv[1]), 2000000, 0, line[0] == 'e', 0, 0);
		printf("listening=%d\n", spanwatch_lib_listening());
		fflush(stdout);
	}
	return 0;
}

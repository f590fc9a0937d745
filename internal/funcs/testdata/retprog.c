// A program with functions whose returns are known, for internal/funcs'
// tests: built with gcc -O2 (and aarch64-linux-gnu-gcc -O2) by the test.
#include <stdio.h>
#include <stdlib.h>

volatile int sink;

__attribute__((noipa)) int leaf(int x) {
	sink = x;
	return x * 3;
}

// multi_ret has a return instruction on each of its paths: gcc -O2
// gives it 5 on x86-64 and on arm64 (the test counts them with objdump).
__attribute__((noipa)) int multi_ret(int x) {
	if (x < 0)
		return -1;
	sink = x;
	switch (x & 3) {
	case 0:
		return leaf(x) + 1;
	case 1:
		return leaf(x) * 7;
	case 2:
		return leaf(leaf(x)) - 5;
	}
	return x;
}

// tail_call ends in a jump to leaf: leaf's return instruction returns for
// it, so it has none of its own.
__attribute__((noipa)) int tail_call(int x) {
	sink = x;
	return leaf(x + 1);
}

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 3;
	printf("%d %d\n", multi_ret(n), tail_call(n));
	return 0;
}

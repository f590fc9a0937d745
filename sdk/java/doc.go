// Package java holds the tests of the Java SDK in this directory
// (io.spanwatch in src/main/java, its JNI library in src/main/native built
// from include/spanwatch.h, and the Makefile that builds both): they build
// the SDK with Debian's OpenJDK 17, run a Java service under a real
// collector with -XX:+PreserveFramePointer, and check exact counts, errors
// and budgets, and that the stack of each slow span starts at the Java
// method that ended it, named from the perf map the SDK keeps current.
// They skip, saying why, where the JDK, root or BPF are missing.
package java

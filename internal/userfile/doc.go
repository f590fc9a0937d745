// Package userfile opens the files other users control — their binaries
// and libraries, debug files, JIT perf maps — for a root agent, as the
// process that named them would see them and as perf(1) would accept them,
// and bounds every operation on them in time, so that no local user can
// make the agent read what they could not, or make it stop.
//
// Open resolves a path inside a directory taken as the root (a process's
// root, /proc/PID/root): absolute symbolic links and ".." stay inside it,
// magic links (/proc/self/root and the like) are never followed, and
// without Options.Symlinks no symbolic link is followed at all. It uses
// openat2(RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS) where the kernel has it
// (5.6+) and a component-by-component walk of its own where it does not,
// or where a seccomp profile refuses openat2. OpenPath opens a path the
// agent trusts, such as procfs's links to what a process runs or mapped
// (/proc/PID/exe, /proc/PID/map_files/…), following them.
//
// Either way the file is first opened with O_PATH, which runs no driver's
// open and never blocks on a FIFO, and checked with fstat: it must be a
// regular file, of an allowed owner (a perf map belongs to the process's
// user or root, as perf(1) requires), readable by the process by its mode
// bits when Options.Reader gives its credentials (a process is never shown
// what it could not read itself), and within the size cap. Only then is it
// opened for reading, O_NONBLOCK, through /proc/self/fd.
//
// Every open and read a user can make hang — a FUSE file whose daemon never
// answers, a network file system, a /proc file behind a process's mmap lock
// — runs through Do, which waits for it until its context ends and then
// gives up, leaving the stuck goroutine behind. An operation is done on
// behalf of someone (a user id): while one of theirs is stuck, new ones
// fail at once, so a user can stall only the reading of their own files,
// and a global cap bounds the goroutines left behind.
//
// Closing a file sends FUSE_FLUSH on FUSE and waits for the answer: a
// File not on a local file system is closed on a goroutine of its own.
//
// Files refused and operations that gave up are counted by reason (Counts),
// together with the parsing caps other packages hit (Count): the agent
// exports them as spanwatch_user_file_limits_total.
//
// Linux only; elsewhere every open fails with errors.ErrUnsupported.
package userfile

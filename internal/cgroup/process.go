package cgroup

import (
	"bufio"
	"bytes"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxProcsRead bounds how many processes of one cgroup are looked at: a
// cgroup with more than one executable is told apart within the first few,
// and the root cgroup can hold thousands.
const maxProcsRead = 256

// ProcessName returns the executable name shared by every process in the
// cgroup directory dir (the base name of /proc/PID/exe, or /proc/PID/comm
// where exe cannot be read), read under procRoot, and the OpenTelemetry
// service name its processes declare (ServiceName). name is "" when the
// cgroup has no process, or processes of more than one executable (see
// Processes). service is "" when no process declares one, or two declare
// different ones; a process declaring none (a shell beside the service)
// does not count against it.
func ProcessName(procRoot, dir string) (name, service string) {
	name, service, _ = Processes(procRoot, dir)
	return name, service
}

// Processes is ProcessName, and tells also whether the cgroup runs more
// than one executable (several): then name is "", and the collector keeps
// the cgroup's series per process (Process names each), since a cgroup's
// name cannot tell which of its processes a span came from.
func Processes(procRoot, dir string) (name, service string, several bool) {
	manyExe, manyService := false, false
	eachProc(dir, func(pid string) bool {
		exe := exeName(procRoot, pid)
		switch {
		case exe == "":
			// The process exited, or is a kernel thread: it emits no
			// spans.
			return true
		case name == "":
			name = exe
		case exe != name:
			manyExe = true
		}
		if svc := ServiceName(procRoot, pid); svc != "" && !manyService {
			switch {
			case service == "":
				service = svc
			case svc != service:
				manyService = true
			}
		}
		return !manyExe || !manyService
	})
	if manyExe {
		name = ""
	}
	if manyService {
		service = ""
	}
	return name, service, manyExe
}

// Several tells whether the processes in the cgroup directory dir run
// more than one executable, as Processes does, reading only the first
// maxProcsRead pids' executables (no environment).
func Several(procRoot, dir string) bool {
	first, several := "", false
	eachProc(dir, func(pid string) bool {
		switch exe := exeName(procRoot, pid); {
		case exe == "":
		case first == "":
			first = exe
		case exe != first:
			several = true
		}
		return !several
	})
	return several
}

// eachProc calls fn with each pid of the first maxProcsRead lines of the
// cgroup directory dir's cgroup.procs, until fn returns false; nothing
// when the file cannot be opened (the cgroup is gone).
func eachProc(dir string, fn func(pid string) bool) {
	f, err := os.Open(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 0; sc.Scan() && n < maxProcsRead; n++ {
		if pid := strings.TrimSpace(sc.Text()); pid != "" && !fn(pid) {
			return
		}
	}
}

// Process returns the executable name of process pid (as ProcessName
// reads it: the base name of /proc/PID/exe, else its comm) and the
// OpenTelemetry service name it declares, read under procRoot; name is
// "" when the process is gone.
func Process(procRoot string, pid uint32) (name, service string) {
	p := strconv.FormatUint(uint64(pid), 10)
	if name = exeName(procRoot, p); name == "" {
		return "", ""
	}
	return name, ServiceName(procRoot, p)
}

// maxEnvironRead bounds how much of a process's environment is read for
// its service name: the environment is the process's to make as large
// as it likes.
const maxEnvironRead = 256 << 10

// maxServiceName bounds a declared service name (longer ones are not
// taken).
const maxServiceName = 128

// ServiceName returns the OpenTelemetry service name process pid declares
// in its environment, as the OpenTelemetry SDKs read it: OTEL_SERVICE_NAME,
// else service.name in OTEL_RESOURCE_ATTRIBUTES (comma-separated key=value
// pairs, values percent-encoded). Only the first maxEnvironRead bytes of
// the environment are read, streamed; a name that is empty, longer than
// maxServiceName, not UTF-8 or holding control characters is not taken.
// A name the SDK is given in code (a resource built by the program) is
// not in the environment: the process's spans do not carry it.
func ServiceName(procRoot, pid string) string {
	f, err := os.Open(filepath.Join(procRoot, pid, "environ"))
	if err != nil {
		return ""
	}
	defer f.Close()
	return serviceFromEnviron(bufio.NewReaderSize(io.LimitReader(f, maxEnvironRead), 4096))
}

// maxEnvEntry bounds one environment entry that is looked into: an
// OTEL_RESOURCE_ATTRIBUTES longer than this is skipped whole.
const maxEnvEntry = 16 << 10

func serviceFromEnviron(r *bufio.Reader) string {
	var fromAttrs string
	var long []byte // an entry longer than the reader's buffer, so far
	overlong := false
	for {
		chunk, err := r.ReadSlice(0)
		if err == bufio.ErrBufferFull {
			if overlong = overlong || len(long)+len(chunk) > maxEnvEntry; !overlong {
				long = append(long, chunk...)
			}
			continue
		}
		entry := chunk
		if long != nil {
			entry = append(long, chunk...)
			long = long[:0:0]
		}
		if !overlong && len(entry) <= maxEnvEntry {
			entry = bytes.TrimSuffix(entry, []byte{0})
			if v, ok := bytes.CutPrefix(entry, []byte("OTEL_SERVICE_NAME=")); ok {
				if name := validService(string(v)); name != "" {
					return name
				}
			} else if v, ok := bytes.CutPrefix(entry, []byte("OTEL_RESOURCE_ATTRIBUTES=")); ok {
				fromAttrs = serviceFromAttributes(string(v))
			}
		}
		overlong = false
		if err != nil {
			return fromAttrs
		}
	}
}

// serviceFromAttributes returns service.name from an
// OTEL_RESOURCE_ATTRIBUTES value.
func serviceFromAttributes(v string) string {
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) != "service.name" {
			continue
		}
		if u, err := url.PathUnescape(strings.TrimSpace(val)); err == nil {
			return validService(u)
		}
		return ""
	}
	return ""
}

func validService(s string) string {
	s = strings.TrimSpace(s)
	if s == "" || len(s) > maxServiceName || !utf8.ValidString(s) {
		return ""
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return ""
		}
	}
	return s
}

// CommName returns a command name as the kernel keeps it (comm: up to 16
// bytes, NUL-terminated), cleaned as exeName cleans names (cleanName).
func CommName(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return cleanName(string(b))
}

// maxExeName bounds a process name (a file name is at most 255 bytes).
const maxExeName = 255

// cleanName makes a process name, which the process's user chooses (a
// file name or a comm may hold any byte but '/' and NUL), fit for labels
// and alerts: bytes that are not UTF-8 become U+FFFD, control characters
// '?', and it is cut to maxExeName bytes. It is never blanked: a name
// made "" would read as a process that exited, and a process could then
// hide beside another in its cgroup.
func cleanName(s string) string {
	s = strings.TrimSpace(strings.ToValidUTF8(s, "\uFFFD"))
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
	if len(s) > maxExeName {
		s = strings.ToValidUTF8(s[:maxExeName], "")
	}
	return s
}

// exeName returns the base name of a process's executable. Reading
// /proc/PID/exe of another user's process needs CAP_SYS_PTRACE; without it
// the command name (comm, at most 15 bytes) stands in. The link is read,
// never followed, and comm is the kernel's (at most TASK_COMM_LEN bytes);
// either is cleaned (cleanName).
func exeName(procRoot, pid string) string {
	if p, err := os.Readlink(filepath.Join(procRoot, pid, "exe")); err == nil {
		// A binary replaced on disk reads "/path/name (deleted)".
		return cleanName(filepath.Base(strings.TrimSuffix(p, " (deleted)")))
	}
	b, err := os.ReadFile(filepath.Join(procRoot, pid, "comm"))
	if err != nil {
		return ""
	}
	return cleanName(string(b))
}

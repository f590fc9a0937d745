package notify

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/spanwatch/spanwatch/config/section"
)

// CheckFiles checks what Validate cannot without the file system: that the
// outbox can be opened where it is configured (the file is a regular file
// spanwatch can write, or its directory exists and is writable, or can be
// created), and that every file a webhook names for its URL, credentials or
// TLS exists and can be read, with the TLS files holding what they should.
// The agent calls it before it starts and spanwatch check calls it, so both
// refuse the same files. Credentials are re-read at each attempt while the
// agent runs (they may be rotated); a file missing then is retried and
// counted as reason "credentials". Errors are *section.Error, all at once.
func (c *Config) CheckFiles() error {
	var errs []error
	errf := func(m *meta, key, format string, a ...any) {
		p := m.at(key)
		errs = append(errs, &section.Error{File: c.File, Line: p.Line, Col: p.Col, Msg: fmt.Sprintf(format, a...)})
	}
	ob := &c.Routing.Outbox
	if ob.Path != "" {
		if err := checkOutboxPath(ob.Path); err != nil {
			errf(&ob.meta, "path", "routing.outbox.path: %v", err)
		}
	}
	for i := range c.Webhooks {
		w := &c.Webhooks[i]
		readable := func(m *meta, key, path string) bool {
			if path == "" {
				return true
			}
			if err := checkReadable(path); err != nil {
				errf(m, key, "webhook %q: %s: %v", w.Name, key, err)
				return false
			}
			return true
		}
		readable(&w.meta, "url_file", w.URLFile)
		readable(&w.meta, "hmac_secret_file", w.HMACSecretFile)
		readable(&w.meta, "bearer_token_file", w.BearerTokenFile)
		if b := w.BasicAuth; b != nil {
			readable(&b.meta, "password_file", b.PasswordFile)
		}
		if t := w.TLS; t != nil {
			ok := readable(&t.meta, "ca_file", t.CAFile)
			ok = readable(&t.meta, "cert_file", t.CertFile) && ok
			ok = readable(&t.meta, "key_file", t.KeyFile) && ok
			if ok {
				// The same code the sender runs when it starts: a CA
				// file without certificates or a key that does not
				// match its certificate fails here, not at start.
				if _, err := tlsConfig(t); err != nil {
					key := "ca_file"
					if t.CAFile == "" {
						key = "cert_file"
					}
					errf(&t.meta, key, "webhook %q: %v", w.Name, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// checkReadable opens a file for reading, which is what the sender will
// do, and refuses what is not a regular file (a directory, say).
func checkReadable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return unwrapPathError(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	return nil
}

// checkOutboxPath refuses an outbox path that New could not open: one that
// is a directory or a file spanwatch cannot write, or whose directory
// cannot be created or written.
func checkOutboxPath(path string) error {
	fi, err := os.Stat(path)
	switch {
	case err == nil:
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file", path)
		}
		if err := writable(path, false); err != nil {
			return fmt.Errorf("%s cannot be written: %w", path, err)
		}
		return nil
	case !missing(err):
		return unwrapPathError(err)
	}
	// The file will be created; openOutbox creates missing directories
	// too, so the nearest directory that exists must be writable.
	dir := filepath.Dir(path)
	for {
		fi, err := os.Stat(dir)
		if err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("%s is not a directory", dir)
			}
			if err := writable(dir, true); err != nil {
				return fmt.Errorf("directory %s cannot be written: %w (create the outbox's directory for spanwatch's user, or choose another path)", dir, err)
			}
			return nil
		}
		if !missing(err) {
			return unwrapPathError(err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return fmt.Errorf("no directory of %s exists", path)
		}
		dir = parent
	}
}

// missing reports whether err says a path does not exist, including when
// one of its directories is a file (ENOTDIR): walking up finds that file.
func missing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// unwrapPathError keeps an *fs.PathError's message as it is ("open
// /x: no such file or directory"): it names the path already.
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe
	}
	return err
}

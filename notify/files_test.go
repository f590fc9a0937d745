package notify

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
)

// TestCheckFiles checks the files a configuration names, each problem at
// the key that names the file, all at once with Validate's.
func TestCheckFiles(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	existing := filepath.Join(dir, "existing.db")
	if err := os.WriteFile(existing, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		name string
		text string
		want []string // substrings of each error, in order; none: valid
	}{
		{"valid", "webhooks:\n  - name: a\n    url: https://x.example\n    hmac_secret_file: " + secret + "\n    bearer_token_file: " + secret +
			"\nrouting:\n  outbox: {path: " + filepath.Join(dir, "new", "deeper", "outbox.db") + "}\n", nil},
		{"existing outbox", "webhooks:\n  - name: a\n    url: https://x.example\nrouting:\n  outbox: {path: " + existing + "}\n", nil},
		{"missing files", "webhooks:\n  - name: a\n    url_file: " + missing + "\n    hmac_secret_file: " + missing +
			"\n    basic_auth: {username: u, password_file: " + missing + "}\nrouting:\n  outbox: {path: " + filepath.Join(dir, "o.db") + "}\n",
			[]string{"test.yaml:3:5: webhook \"a\": url_file: open " + missing, "test.yaml:4:5: webhook \"a\": hmac_secret_file:", "test.yaml:5:31: webhook \"a\": password_file:"}},
		{"directory as secret", "webhooks:\n  - name: a\n    url: https://x.example\n    bearer_token_file: " + dir + "\nrouting:\n  outbox: {path: " + filepath.Join(dir, "o.db") + "}\n",
			[]string{"test.yaml:4:5: webhook \"a\": bearer_token_file: " + dir + " is not a regular file"}},
		{"tls", "webhooks:\n  - name: a\n    url: https://x.example\n    tls: {ca_file: " + notPEM + "}\nrouting:\n  outbox: {path: " + filepath.Join(dir, "o.db") + "}\n",
			[]string{"test.yaml:4:11: webhook \"a\": tls ca_file " + notPEM + ": no PEM certificates found"}},
		{"outbox is a directory", "webhooks:\n  - name: a\n    url: https://x.example\nrouting:\n  outbox: {path: " + dir + "}\n",
			[]string{"test.yaml:5:12: routing.outbox.path: " + dir + " is not a regular file"}},
		{"outbox under a file", "webhooks:\n  - name: a\n    url: https://x.example\nrouting:\n  outbox: {path: " + filepath.Join(secret, "o.db") + "}\n",
			[]string{"test.yaml:5:12: routing.outbox.path: " + secret + " is not a directory"}},
		{"with Validate's", "webhooks:\n  - name: a\n    url: https://x.example\n    max_alerts: -1\n    hmac_secret_file: " + missing + "\nrouting:\n  outbox: {path: " + filepath.Join(dir, "o.db") + "}\n",
			[]string{"test.yaml:4:5: webhook \"a\": max_alerts must not be negative", "test.yaml:5:5: webhook \"a\": hmac_secret_file: open"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var doc struct {
				Webhooks yaml.Node `yaml:"webhooks"`
				Routing  yaml.Node `yaml:"routing"`
			}
			if err := yaml.Unmarshal([]byte(tc.text), &doc); err != nil {
				t.Fatal(err)
			}
			_, err := ParseConfigWithFiles("test.yaml", &doc.Webhooks, &doc.Routing)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.want) {
				t.Fatalf("errors:\n%v\nwant %d", err, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(lines[i], w) {
					t.Errorf("error %d = %q, want %q...", i, lines[i], w)
				}
			}
		})
	}
	// Nothing was created by checking.
	if _, err := os.Stat(filepath.Join(dir, "new")); !os.IsNotExist(err) {
		t.Errorf("checking created the outbox directory: %v", err)
	}
}

// TestDecodeReportsAll checks that the decoder reports every mistake of
// both sections in one pass, not the first one.
func TestDecodeReportsAll(t *testing.T) {
	text := "webhooks:\n  - name: a\n    urll: https://x\n    timeout: soon\n  - name: b\n    url: [x]\nrouting:\n  outbx: {}\n"
	var doc struct {
		Webhooks yaml.Node `yaml:"webhooks"`
		Routing  yaml.Node `yaml:"routing"`
	}
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatal(err)
	}
	_, err := ParseConfig("test.yaml", &doc.Webhooks, &doc.Routing)
	if err == nil {
		t.Fatal("no error")
	}
	want := []string{
		`test.yaml:3:5: unknown key "urll"`,
		`test.yaml:4:14: invalid duration "soon"`,
		`test.yaml:6:10: expected a string, got a list`,
		`test.yaml:8:3: unknown key "outbx"`,
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Fatalf("errors:\n%v", err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("error %d = %q, want %q...", i, lines[i], w)
		}
	}
}

// ParseConfigWithFiles is ParseConfig followed by CheckFiles, reporting
// the problems of both at once, as package config does.
func ParseConfigWithFiles(filename string, webhooks, routing *yaml.Node) (*Config, error) {
	d := section.NewDecoder(filename, nil)
	c := Decode(d, webhooks, routing, true)
	return c, d.Err()
}

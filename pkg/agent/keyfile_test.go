package agent

import (
	"bytes"
	"encoding/base64"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeKeyFile writes content to a new file with exactly mode and returns
// its path.
func writeKeyFile(t *testing.T, content string, mode fs.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// captureDefaultLog sends slog.Default() to a buffer for the test.
func captureDefaultLog(t *testing.T) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	return &buf
}

func TestReadKey(t *testing.T) {
	key32 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)) + "\n"
	tests := []struct {
		name    string
		content string
		mode    fs.FileMode
		missing bool
		wantErr []string // substrings; nil: the key is read
		warn    bool     // a warning naming the file and mode is logged
	}{
		{name: "0600", content: key32, mode: 0o600},
		{name: "0640 group-readable", content: key32, mode: 0o640},
		{name: "0440 Secret volume with fsGroup", content: key32, mode: 0o440},
		{name: "0644 readable by others", content: key32, mode: 0o644, warn: true},
		{name: "0660 group-writable", content: key32, mode: 0o660, wantErr: []string{"gossip key", "mode 0660", "writable by group", "chmod 600"}},
		{name: "0666 world-writable", content: key32, mode: 0o666, wantErr: []string{"mode 0666", "writable by group and others"}},
		{name: "missing", missing: true, wantErr: []string{"no such file", "head -c 32 /dev/urandom | base64"}},
		{name: "not base64", content: "not a key!", mode: 0o600, wantErr: []string{"not base64"}},
		{name: "wrong length", content: base64.StdEncoding.EncodeToString([]byte("short")), mode: 0o600, wantErr: []string{"5 bytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := captureDefaultLog(t)
			var p string
			if tt.missing {
				p = filepath.Join(t.TempDir(), "absent")
			} else {
				p = writeKeyFile(t, tt.content, tt.mode)
			}
			key, err := readKey(p, nil)
			if tt.wantErr == nil {
				if err != nil || len(key) != 32 {
					t.Fatalf("readKey = %d bytes, %v", len(key), err)
				}
			} else {
				if err == nil {
					t.Fatalf("readKey accepted the file")
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
			}
			warned := strings.Contains(logs.String(), "level=WARN")
			if warned != tt.warn {
				t.Errorf("warning logged = %v, want %v: %s", warned, tt.warn, logs)
			}
			if tt.warn && (!strings.Contains(logs.String(), p) || !strings.Contains(logs.String(), "0644")) {
				t.Errorf("warning does not name the file and its mode: %s", logs)
			}
		})
	}
}

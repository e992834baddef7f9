package config

import (
	"bytes"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// writeSecret creates a file named name in dir with exactly mode (the
// umask does not apply) and returns its path.
func writeSecret(t *testing.T, dir, name string, mode fs.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// secretDir makes directory name in dir with exactly mode and returns it;
// it is made writable again for t.TempDir's cleanup.
func secretDir(t *testing.T, dir, name string, mode fs.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// secretVolume lays out a file like a Kubernetes Secret volume does:
// dir/key -> ..data/key, ..data -> ..2026_01_01_00_00_00.000000001, the
// real file inside that, with mode. It returns dir/key.
func secretVolume(t *testing.T, mode fs.FileMode) string {
	t.Helper()
	dir := t.TempDir()
	ts := filepath.Join(dir, "..2026_01_01_00_00_00.000000001")
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	writeSecret(t, ts, "key", mode)
	if err := os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "key"), filepath.Join(dir, "key")); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "key")
}

func TestCheckSecretFile(t *testing.T) {
	tests := []struct {
		name        string
		path        func(t *testing.T) string
		wantErr     []string // substrings of the error; nil: no error
		wantWarning []string // substrings of the warning; nil: none
	}{
		{name: "0600", path: func(t *testing.T) string { return writeSecret(t, t.TempDir(), "pw", 0o600) }},
		{name: "0400", path: func(t *testing.T) string { return writeSecret(t, t.TempDir(), "pw", 0o400) }},
		{name: "0640 group-readable", path: func(t *testing.T) string { return writeSecret(t, t.TempDir(), "pw", 0o640) }},
		{name: "0440 (our Secret volumes)", path: func(t *testing.T) string { return writeSecret(t, t.TempDir(), "pw", 0o440) }},
		{name: "0644 readable by others", path: func(t *testing.T) string { return writeSecret(t, t.TempDir(), "pw", 0o644) },
			wantWarning: []string{"/pw has mode 0644", "readable by every user", "chmod 600", "defaultMode: 0440"}},
		{name: "0604 readable by others", path: func(t *testing.T) string { return writeSecret(t, t.TempDir(), "pw", 0o604) },
			wantWarning: []string{"mode 0604"}},
		{name: "0660 group-writable", path: func(t *testing.T) string { return writeSecret(t, t.TempDir(), "pw", 0o660) },
			wantErr: []string{"/pw has mode 0660", "writable by group", "chmod 600", "chmod 640"}},
		{name: "0602 world-writable", path: func(t *testing.T) string { return writeSecret(t, t.TempDir(), "pw", 0o602) },
			wantErr: []string{"mode 0602", "writable by others"}},
		{name: "0666", path: func(t *testing.T) string { return writeSecret(t, t.TempDir(), "pw", 0o666) },
			wantErr: []string{"mode 0666", "writable by group and others"}},
		{name: "0777", path: func(t *testing.T) string { return writeSecret(t, t.TempDir(), "pw", 0o777) },
			wantErr: []string{"mode 0777"}},
		{name: "Secret volume symlinks, 0440 target", path: func(t *testing.T) string { return secretVolume(t, 0o440) }},
		{name: "Secret volume symlinks, default 0644 target", path: func(t *testing.T) string { return secretVolume(t, 0o644) },
			wantWarning: []string{"mode 0644"}},
		{name: "Secret volume symlinks, writable target", path: func(t *testing.T) string { return secretVolume(t, 0o664) },
			wantErr: []string{"mode 0664", "writable by group"}},
		// The directories that lead to the file: whoever may write one
		// can swap the file (or a directory or symlink on the way) for
		// their own, whatever the file's mode.
		{name: "world-writable directory", path: func(t *testing.T) string {
			return writeSecret(t, secretDir(t, t.TempDir(), "open", 0o777), "pw", 0o600)
		},
			wantErr: []string{"/open has mode 0777", "writable by group and others", "chmod go-w"}},
		{name: "group-writable directory", path: func(t *testing.T) string {
			return writeSecret(t, secretDir(t, t.TempDir(), "team", 0o770), "pw", 0o600)
		},
			wantErr: []string{"/team has mode 0770", "writable by group", "chmod go-w"}},
		{name: "writable directory further up", path: func(t *testing.T) string {
			return writeSecret(t, secretDir(t, secretDir(t, t.TempDir(), "open", 0o707), "private", 0o700), "pw", 0o600)
		}, wantErr: []string{"/open has mode 0707", "writable by others"}},
		{name: "symlink into a world-writable directory", path: func(t *testing.T) string {
			target := writeSecret(t, secretDir(t, t.TempDir(), "open", 0o777), "pw", 0o600)
			link := filepath.Join(t.TempDir(), "pw")
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			return link
		}, wantErr: []string{"/open has mode 0777"}},
		{name: "sticky world-writable directory (like /tmp)", path: func(t *testing.T) string {
			return writeSecret(t, secretDir(t, t.TempDir(), "tmp", 0o777|fs.ModeSticky), "pw", 0o600)
		}},
		{name: "Secret volume in a sticky tmpfs root (kubelet)", path: func(t *testing.T) string {
			p := secretVolume(t, 0o440)
			if err := os.Chmod(filepath.Dir(p), 0o777|fs.ModeSticky); err != nil {
				t.Fatal(err)
			}
			return p
		}},
		{name: "Secret volume in a world-writable dir without the sticky bit", path: func(t *testing.T) string {
			p := secretVolume(t, 0o440)
			if err := os.Chmod(filepath.Dir(p), 0o777); err != nil {
				t.Fatal(err)
			}
			return p
		}, wantErr: []string{"has mode 0777", "chmod go-w"}},
		{name: "systemd layout: root:fenced 0750 directories", path: func(t *testing.T) string {
			return writeSecret(t, secretDir(t, secretDir(t, t.TempDir(), "fenced", 0o750), "bmc", 0o750), "password", 0o640)
		}},
		{name: "directory", path: func(t *testing.T) string { return t.TempDir() },
			wantErr: []string{"is a directory"}},
		{name: "missing", path: func(t *testing.T) string { return filepath.Join(t.TempDir(), "nope") },
			wantErr: []string{"no such file"}},
	}
	check := func(t *testing.T, what string, got string, want []string) {
		t.Helper()
		if want == nil {
			if got != "" {
				t.Errorf("%s = %q, want none", what, got)
			}
			return
		}
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s %q does not contain %q", what, got, w)
			}
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.path(t)
			warning, err := CheckSecretFile(p)
			errText := ""
			if err != nil {
				errText = err.Error()
			}
			check(t, "CheckSecretFile error", errText, tt.wantErr)
			check(t, "CheckSecretFile warning", warning, tt.wantWarning)

			// ReadSecretFile applies the same rule to the file it opened.
			data, warning, err := ReadSecretFile(p)
			errText = ""
			if err != nil {
				errText = err.Error()
			}
			check(t, "ReadSecretFile error", errText, tt.wantErr)
			check(t, "ReadSecretFile warning", warning, tt.wantWarning)
			if err == nil && string(data) != "s3cret\n" {
				t.Errorf("ReadSecretFile read %q", data)
			} else if err != nil && data != nil {
				t.Errorf("ReadSecretFile returned data with an error")
			}

			// So does the BMC password source.
			pw, err := PasswordSource{File: p}.Read()
			if (err != nil) != (tt.wantErr != nil) || (err == nil && pw != "s3cret") {
				t.Errorf("PasswordSource.Read = %q, %v", pw, err)
			}
		})
	}
}

func TestParseRefusesWritablePasswordFile(t *testing.T) {
	p := writeSecret(t, t.TempDir(), "pw", 0o664)
	_, err := Parse([]byte(header+`
bmc:
  nodes:
    - {name: worker-1, protocol: ipmi, address: 10.0.0.1, username: u, passwordFile: `+p+`}
`), "t.yaml")
	if err == nil {
		t.Fatal("a group-writable password file was accepted")
	}
	for _, want := range []string{"bmc.nodes[0].passwordFile (worker-1):", "mode 0664", "chmod 600"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestWarnSecretFileOnce(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	p := writeSecret(t, t.TempDir(), "pw", 0o644)
	warning, err := CheckSecretFile(p)
	if err != nil || warning == "" {
		t.Fatalf("CheckSecretFile = %q, %v", warning, err)
	}
	for range 3 {
		WarnSecretFileOnce(log, p, warning)
	}
	WarnSecretFileOnce(log, p, "")
	if n := strings.Count(buf.String(), "level=WARN"); n != 1 {
		t.Errorf("logged %d warnings, want 1:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "file="+p) || !strings.Contains(buf.String(), "0644") {
		t.Errorf("warning does not name the file and mode: %s", buf.String())
	}

	// Another mode of the same file is news.
	if err := os.Chmod(p, 0o604); err != nil {
		t.Fatal(err)
	}
	warning, _ = CheckSecretFile(p)
	WarnSecretFileOnce(log, p, warning)
	if n := strings.Count(buf.String(), "level=WARN"); n != 2 {
		t.Errorf("logged %d warnings after a chmod, want 2:\n%s", n, buf.String())
	}
}

// TestDeployedSecretVolumesPassCheck finds every Secret volume in
// deploy/ and checks that a file mounted with its mode, as the kubelet
// mounts it, passes CheckSecretFile without even a warning.
func TestDeployedSecretVolumesPassCheck(t *testing.T) {
	var found int
	err := filepath.WalkDir("../../deploy", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || (filepath.Ext(path) != ".yaml" && filepath.Ext(path) != ".yml") {
			return err
		}
		if filepath.Base(filepath.Dir(path)) == "templates" && strings.Contains(path, "/helm/") {
			// Helm templates are not YAML until rendered; the chart's
			// render is the kustomize base (test/deploy TestHelmChart),
			// Secret volumes included.
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, doc := range strings.Split(string(data), "\n---") {
			var obj any
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				t.Errorf("%s: %v", path, err)
				continue
			}
			for _, v := range secretVolumes(obj) {
				found++
				name, _ := v["secretName"].(string)
				mode := fs.FileMode(0o644) // the API server's default
				if m, ok := v["defaultMode"].(float64); ok {
					mode = fs.FileMode(m)
				}
				// The kubelet adds group read for fsGroup on read-only
				// volumes; it never adds write bits to a Secret.
				p := secretVolume(t, mode|0o040)
				if warning, err := CheckSecretFile(p); err != nil || warning != "" {
					t.Errorf("%s: Secret volume %s (mode %04o): warning %q, error %v", path, name, mode, warning, err)
				}
				if items, ok := v["items"].([]any); ok {
					for _, it := range items {
						if m, ok := it.(map[string]any)["mode"].(float64); ok {
							if _, err := CheckSecretFile(secretVolume(t, fs.FileMode(m))); err != nil {
								t.Errorf("%s: Secret volume %s item mode %04o: %v", path, name, int(m), err)
							}
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no Secret volume found under deploy/: is the walk broken?")
	}
}

// secretVolumes returns every "secret" volume source (a map with a
// secretName) anywhere in a decoded manifest.
func secretVolumes(obj any) []map[string]any {
	var out []map[string]any
	switch v := obj.(type) {
	case map[string]any:
		if s, ok := v["secret"].(map[string]any); ok {
			if _, ok := s["secretName"]; ok {
				out = append(out, s)
			}
		}
		for _, child := range v {
			out = append(out, secretVolumes(child)...)
		}
	case []any:
		for _, child := range v {
			out = append(out, secretVolumes(child)...)
		}
	}
	return out
}

// TestSecretFileDirectoryOwners: a directory on the way to a secret file
// must belong to root or to this process — its owner can replace what is
// in it whatever its mode — and in a sticky world-writable directory the
// entry itself must, since its owner may still rename or delete it. Needs
// root, to give files away.
func TestSecretFileDirectoryOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	const stranger = 4242
	chown := func(t *testing.T, p string) string {
		t.Helper()
		if err := os.Lchown(p, stranger, stranger); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name    string
		path    func(t *testing.T) string
		wantErr []string // nil: accepted
	}{
		{"directory of another user", func(t *testing.T) string {
			return writeSecret(t, chown(t, secretDir(t, t.TempDir(), "theirs", 0o755)), "pw", 0o600)
		}, []string{"/theirs is owned by uid 4242", "chown root"}},
		{"file of another user in a sticky directory", func(t *testing.T) string {
			return chown(t, writeSecret(t, secretDir(t, t.TempDir(), "tmp", 0o777|fs.ModeSticky), "pw", 0o600))
		}, []string{"/tmp is writable by others", "/pw belongs to uid 4242"}},
		{"directory of another user in a sticky directory", func(t *testing.T) string {
			tmp := secretDir(t, t.TempDir(), "tmp", 0o777|fs.ModeSticky)
			return writeSecret(t, chown(t, secretDir(t, tmp, "sub", 0o700)), "pw", 0o600)
		}, []string{"/sub is owned by uid 4242"}},
		{"file of another user in a private directory", func(t *testing.T) string {
			return chown(t, writeSecret(t, t.TempDir(), "pw", 0o600))
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := CheckSecretFile(tt.path(t))
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want an error with %q", tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

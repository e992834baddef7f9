package secretvolume

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestWrite: the layout the kubelet makes — names that are symlinks into
// ..data, ..data a symlink to one timestamped directory — and an update
// that swaps the contents, drops the names no longer there and the old
// directory.
func TestWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	entries := func() (names, hidden []string) {
		t.Helper()
		es, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if strings.HasPrefix(e.Name(), ".") {
				hidden = append(hidden, e.Name())
			} else {
				names = append(names, e.Name())
			}
		}
		return names, hidden
	}
	if err := Write(dir, map[string][]byte{"key": []byte("a"), "next": []byte("b")}, 0o440); err != nil {
		t.Fatal(err)
	}
	first, err := os.Readlink(filepath.Join(dir, "..data"))
	if err != nil {
		t.Fatal(err)
	}
	if link, _ := os.Readlink(filepath.Join(dir, "key")); link != "..data/key" {
		t.Errorf("key links to %q, want ..data/key", link)
	}
	if fi, err := os.Stat(filepath.Join(dir, "key")); err != nil || fi.Mode().Perm() != 0o440 {
		t.Errorf("key: %v, %v; want mode 0440", fi, err)
	}
	if read("key") != "a" || read("next") != "b" {
		t.Errorf("contents %q %q", read("key"), read("next"))
	}

	if err := Write(dir, map[string][]byte{"key": []byte("b"), "previous": []byte("a")}, 0o440); err != nil {
		t.Fatal(err)
	}
	if read("key") != "b" || read("previous") != "a" {
		t.Errorf("after the update: %q %q", read("key"), read("previous"))
	}
	names, hidden := entries()
	if !slices.Equal(names, []string{"key", "previous"}) {
		t.Errorf("names %v, want key and previous", names)
	}
	second, _ := os.Readlink(filepath.Join(dir, "..data"))
	if second == first || len(hidden) != 2 || !slices.Contains(hidden, second) || slices.Contains(hidden, first) {
		t.Errorf("..data %s → %s, hidden entries %v: want ..data and the new directory only", first, second, hidden)
	}
	if err := Write(dir, map[string][]byte{"../x": nil}, 0o440); err == nil {
		t.Error("a name with a slash was written")
	}
}

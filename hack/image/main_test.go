package main

import (
	"archive/tar"
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRootfsIsTheLayer: the files -rootfs writes (the Dockerfile's build
// stage) are the files of the layer make image writes — names, types,
// modes, contents and times — so that both builds hold the same image.
func TestRootfsIsTheLayer(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fenced")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := build{binary: bin, ca: ca, version: "v", created: time.Unix(1700000000, 0).UTC()}
	layer, err := b.rootfs()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "rootfs")
	if err := b.writeRootfs(root); err != nil {
		t.Fatal(err)
	}
	seen := 0
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seen++
		name := strings.TrimSuffix(h.Name, "/")
		fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil {
			t.Fatalf("%s is in the layer, not in the rootfs: %v", name, err)
		}
		wantMode := fs.FileMode(h.Mode & 0o777)
		if h.Mode&0o1000 != 0 {
			wantMode |= fs.ModeSticky
		}
		if fi.IsDir() != (h.Typeflag == tar.TypeDir) || fi.Mode()&(fs.ModePerm|fs.ModeSticky) != wantMode || !fi.ModTime().Equal(h.ModTime) {
			t.Errorf("%s: rootfs %v %s, layer dir=%v %v %s", name, fi.IsDir(), fi.Mode(), h.Typeflag == tar.TypeDir, wantMode, h.ModTime)
		}
		if h.Typeflag == tar.TypeReg {
			want, _ := io.ReadAll(tr)
			got, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s: rootfs content differs from the layer's (%v)", name, err)
			}
		}
	}
	count := 0
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if p != root {
			count++
		}
		return err
	})
	if count != seen {
		t.Fatalf("rootfs has %d entries, the layer %d", count, seen)
	}
}

// TestFullName: the archive names the image as containerd's CRI looks it up.
func TestFullName(t *testing.T) {
	for tag, want := range map[string]string{
		"fenced:v1":                   "docker.io/library/fenced:v1",
		"me/fenced:v1":                "docker.io/me/fenced:v1",
		"registry.example/fenced:v1":  "registry.example/fenced:v1",
		"localhost:5000/a/fenced:dev": "localhost:5000/a/fenced:dev",
	} {
		if got, err := fullName(tag); err != nil || got != want {
			t.Errorf("fullName(%q) = %q, %v; want %q", tag, got, err, want)
		}
	}
	if _, err := fullName("Not A Reference"); err == nil {
		t.Error("a malformed tag was accepted")
	}
}
